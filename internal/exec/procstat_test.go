package exec

import "testing"

const statText = `cpu  100 5 50 1000 20 3 2 0 7 0
cpu0 50 2 25 500 10 1 1 0 3 0
cpu1 50 3 25 500 10 2 1 0 4 0
intr 12345
`

func TestParseCPUTimes(t *testing.T) {
	got, err := ParseCPUTimes([]byte(statText))
	// Guest time (7) is within user already, and not read apart.
	want := CPUTimes{User: 100, Nice: 5, System: 50, Idle: 1000, IOWait: 20, IRQ: 3, SoftIRQ: 2, CPUs: 2}
	if err != nil || got != want {
		t.Errorf("ParseCPUTimes = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2\ncpu0 1 2 3 4\n", "cpu a b c d e f g h\ncpu0 1 2 3 4\n", "cpu 1 2 3 4 5 6 7 8\n"} {
		if got, err := ParseCPUTimes([]byte(bad)); err == nil {
			t.Errorf("ParseCPUTimes(%q) = %+v, want an error", bad, got)
		}
	}
}
