package bench

import (
	"math"
	"testing"

	"github.com/sandboxd/sandbox/internal/exec"
)

func TestParseCPUTimes(t *testing.T) {
	ticks, err := exec.ParseCPUTimes([]byte("cpu  1000 20 300 5000 70 4 6 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"))
	if want, got := (cpuTimes{busy: 13.3, steal: 0.1, idle: 50.7}), inSeconds(ticks); err != nil || got != want {
		t.Errorf("got %+v, %v; want %+v (busy: user, nice, system, irq, softirq; idle: idle, iowait)", got, err, want)
	}
	if _, err := exec.ParseCPUTimes([]byte("intr 1 2 3\n")); err == nil {
		t.Error("a first line that is not the cpu totals was read")
	}
	if _, err := readCPUTimes(); err != nil {
		t.Errorf("this machine's /proc/stat: %v", err)
	}
}

func TestParseProcStat(t *testing.T) {
	// A name with a space and a parenthesis in it; utime 100, stime 50,
	// cutime 7, cstime 3.
	p, err := parseProcStat("42 (my (odd) cmd) S 1 42 42 0 -1 4194560 100 0 0 0 100 50 7 3 20 0 1 0 5 0 0\n")
	if err != nil || p.comm != "my (odd) cmd" || p.own != 150 || p.reaped != 10 {
		t.Errorf("got %+v, %v; want my (odd) cmd with 150 ticks its own and 10 reaped", p, err)
	}
	if p, _ := parseProcStat("7 (kworker/0:1-events) I 2 0 0 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 5 0 0"); p.comm != "kworker" {
		t.Errorf("kernel worker named %q, want kworker", p.comm)
	}
	if _, err := parseProcStat("42 (x) S 1"); err == nil {
		t.Error("a short line was read")
	}
	if len(readProcs()) == 0 {
		t.Error("no process read on this machine")
	}
}

func TestByCommand(t *testing.T) {
	a := map[int]procTime{1: {"systemd", 10, 1000}, 2: {"containerd", 500, 0}, 3: {"gone", 9, 0}, 4: {"old", 100, 5}}
	b := map[int]procTime{1: {"systemd", 11, 1053}, 2: {"containerd", 534, 2}, 4: {"reused", 20, 1}, 5: {"new", 10, 0}}
	got := byCommand(a, b)
	want := map[string]float64{
		"reaped by systemd": 0.53, "systemd": 0.01, "containerd": 0.34, "reaped by containerd": 0.02,
		"reused": 0.2, "reaped by reused": 0.01, "new": 0.1,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	if s := topCommands(got, 2, 1); s != "reaped by systemd 0.53, containerd 0.34" {
		t.Errorf("top 2: %q", s)
	}
}
