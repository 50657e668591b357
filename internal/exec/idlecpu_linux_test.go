package exec

import (
	"errors"
	"os"
	"testing"
	"time"
)

const statText = `cpu  100 5 50 1000 20 3 2 0 7 0
cpu0 50 2 25 500 10 1 1 0 3 0
cpu1 50 3 25 500 10 2 1 0 4 0
intr 12345
`

func TestParseCPUTimes(t *testing.T) {
	got, err := parseCPUTimes([]byte(statText))
	// Guest time (7) is counted in user already; idle is idle and iowait.
	if want := (cpuTimes{idle: 1020, total: 1180, cpus: 2}); err != nil || got != want {
		t.Errorf("parseCPUTimes = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2\ncpu0 1 2 3 4\n", "cpu a b c d\ncpu0 1 2 3 4\n", "cpu 1 2 3 4\n"} {
		if got, err := parseCPUTimes([]byte(bad)); err == nil {
			t.Errorf("parseCPUTimes(%q) = %+v, want an error", bad, got)
		}
	}
	if _, err := readCPUTimes(procStat); err != nil {
		t.Errorf("this machine's %s: %v", procStat, err)
	}
}

func TestIdleCPUs(t *testing.T) {
	at := func(idle, total uint64) cpuTimes { return cpuTimes{idle: idle, total: total, cpus: 4} }
	for _, c := range []struct {
		before, after cpuTimes
		want          float64
	}{
		{at(0, 0), at(100, 400), 1},   // a quarter of 4 CPUs idle
		{at(0, 0), at(400, 400), 4},   // all idle
		{at(10, 10), at(10, 410), 0},  // none
		{at(10, 10), at(10, 10), 0},   // no time passed
		{at(50, 500), at(10, 600), 0}, // counters that went back
	} {
		if got := c.after.idleCPUs(c.before); got != c.want {
			t.Errorf("%+v after %+v: %v idle CPUs, want %v", c.after, c.before, got, c.want)
		}
	}
}

// TestCPUGate: the gate holds while the windows are busy, lets the step go
// in the first window with a CPU's worth idle (half of one on one CPU),
// lets it go when the times cannot be read, and says no once stopped.
func TestCPUGate(t *testing.T) {
	seq := func(ts ...cpuTimes) (func() (cpuTimes, error), *int) {
		n := 0
		return func() (cpuTimes, error) {
			if n >= len(ts) {
				return cpuTimes{}, errors.New("no more")
			}
			n++
			return ts[n-1], nil
		}, &n
	}
	two := func(idle, total uint64) cpuTimes { return cpuTimes{idle: idle, total: total, cpus: 2} }
	// Busy (0.2 of 2 CPUs idle), busy (0.8), then quiet (1.2).
	read, n := seq(two(0, 0), two(2, 20), two(2, 20), two(10, 40), two(10, 40), two(22, 60))
	if !cpuGate(read, time.Millisecond)(nil) || *n != 6 {
		t.Errorf("the gate let go after %d reads, want 6: two busy windows, then a quiet one", *n)
	}
	one := func(idle, total uint64) cpuTimes { return cpuTimes{idle: idle, total: total, cpus: 1} }
	read, n = seq(one(0, 0), one(4, 10), one(4, 10), one(9, 20))
	if !cpuGate(read, time.Millisecond)(nil) || *n != 4 {
		t.Errorf("one CPU: the gate let go after %d reads, want 4 (0.4 idle, then 0.5)", *n)
	}
	if !cpuGate(func() (cpuTimes, error) { return cpuTimes{}, os.ErrNotExist }, time.Millisecond)(nil) {
		t.Error("the gate held a step when the CPU times could not be read")
	}
	stop := make(chan struct{})
	close(stop)
	busy := func() (cpuTimes, error) { return two(0, 0), nil }
	if cpuGate(busy, time.Hour)(stop) {
		t.Error("a stopped gate let the step go")
	}
}
