package exec

import (
	"errors"
	"os"
	"testing"
	"time"
)

func TestReadCPUTimes(t *testing.T) {
	if got, err := ReadCPUTimes(); err != nil || got.CPUs == 0 || got.Idle == 0 {
		t.Errorf("this machine's %s: %+v, %v", ProcStat, got, err)
	}
}

func TestIdleCPUs(t *testing.T) {
	at := func(idle, total uint64) CPUTimes { return ticks(idle, total, 4) }
	for _, c := range []struct {
		before, after CPUTimes
		want          float64
	}{
		{at(0, 0), at(100, 400), 1},   // a quarter of 4 CPUs idle
		{at(0, 0), at(400, 400), 4},   // all idle
		{at(10, 10), at(10, 410), 0},  // none
		{at(10, 10), at(10, 10), 0},   // no time passed
		{at(50, 500), at(10, 600), 0}, // counters that went back
	} {
		if got := idleCPUs(c.before, c.after); got != c.want {
			t.Errorf("%+v after %+v: %v idle CPUs, want %v", c.after, c.before, got, c.want)
		}
	}
}

// TestCPUGate: the gate holds while the windows are busy, lets the step go
// in the first window with a CPU's worth idle (half of one on one CPU),
// lets it go when the times cannot be read, and says no once stopped.
func TestCPUGate(t *testing.T) {
	seq := func(ts ...CPUTimes) (func() (CPUTimes, error), *int) {
		n := 0
		return func() (CPUTimes, error) {
			if n >= len(ts) {
				return CPUTimes{}, errors.New("no more")
			}
			n++
			return ts[n-1], nil
		}, &n
	}
	two := func(idle, total uint64) CPUTimes { return ticks(idle, total, 2) }
	// Busy (0.2 of 2 CPUs idle), busy (0.8), then quiet (1.2).
	read, n := seq(two(0, 0), two(2, 20), two(2, 20), two(10, 40), two(10, 40), two(22, 60))
	if !cpuGate(read, time.Millisecond)(nil) || *n != 6 {
		t.Errorf("the gate let go after %d reads, want 6: two busy windows, then a quiet one", *n)
	}
	one := func(idle, total uint64) CPUTimes { return ticks(idle, total, 1) }
	read, n = seq(one(0, 0), one(4, 10), one(4, 10), one(9, 20))
	if !cpuGate(read, time.Millisecond)(nil) || *n != 4 {
		t.Errorf("one CPU: the gate let go after %d reads, want 4 (0.4 idle, then 0.5)", *n)
	}
	if !cpuGate(func() (CPUTimes, error) { return CPUTimes{}, os.ErrNotExist }, time.Millisecond)(nil) {
		t.Error("the gate held a step when the CPU times could not be read")
	}
	stop := make(chan struct{})
	close(stop)
	busy := func() (CPUTimes, error) { return two(0, 0), nil }
	if cpuGate(busy, time.Hour)(stop) {
		t.Error("a stopped gate let the step go")
	}
}

// ticks are CPU times of cpus CPUs with idle of total ticks idle.
func ticks(idle, total uint64, cpus int) CPUTimes {
	return CPUTimes{User: total - idle, Idle: idle, CPUs: cpus}
}
