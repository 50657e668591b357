package bench

import "testing"

func TestParseBusy(t *testing.T) {
	got, err := parseBusy("cpu  1000 20 300 5000 70 4 6 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	if err != nil || got != (1000+20+300+4+6+10)/100.0 {
		t.Errorf("busy %v, %v; want 13.4 CPU-s (user, nice, system, irq, softirq, steal)", got, err)
	}
	if _, err := parseBusy("intr 1 2 3\n"); err == nil {
		t.Error("a first line that is not the cpu totals was read")
	}
	if _, err := busySeconds(); err != nil {
		t.Errorf("this machine's /proc/stat: %v", err)
	}
}
