package pool

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryMetricRegistered: each metric field of the pool is among the
// collectors RegisterMetrics registers, and they register without a clash.
func TestEveryMetricRegistered(t *testing.T) {
	m := newMetrics()
	registered := map[prometheus.Collector]bool{}
	for _, c := range m.all {
		registered[c] = true
	}
	v := reflect.ValueOf(m).Elem()
	collector := reflect.TypeFor[prometheus.Collector]()
	fields := 0
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.Type().Implements(collector) {
			continue
		}
		fields++
		// The fields are unexported: read each through its address.
		c := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(prometheus.Collector)
		if !registered[c] {
			t.Errorf("metric %s is not registered", v.Type().Field(i).Name)
		}
	}
	if fields != len(m.all) {
		t.Errorf("%d metric fields, %d registered", fields, len(m.all))
	}
	p := &Pool{m: m}
	if err := p.RegisterMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
}
