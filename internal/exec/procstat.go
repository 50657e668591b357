package exec

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStat is where the machine's CPU times are read. In a container it is
// still the machine's, not the container's.
const ProcStat = "/proc/stat"

// CPUTimes are the machine's CPU times so far, in clock ticks (USER_HZ, 100
// on every Linux architecture), from ProcStat's "cpu" line (guest time is
// within User already), and how many CPUs it has (the cpuN lines).
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
	CPUs                                                  int
}

// ReadCPUTimes reads the machine's CPU times from ProcStat.
func ReadCPUTimes() (CPUTimes, error) {
	b, err := os.ReadFile(ProcStat)
	if err != nil {
		return CPUTimes{}, err
	}
	return ParseCPUTimes(b)
}

// ParseCPUTimes reads ProcStat's text.
func ParseCPUTimes(b []byte) (CPUTimes, error) {
	var t CPUTimes
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case f[0] == "cpu":
			// user nice system idle iowait irq softirq steal
			if len(f) < 9 {
				return CPUTimes{}, fmt.Errorf("%s: a cpu line of %d fields", ProcStat, len(f))
			}
			for i, p := range []*uint64{&t.User, &t.Nice, &t.System, &t.Idle, &t.IOWait, &t.IRQ, &t.SoftIRQ, &t.Steal} {
				n, err := strconv.ParseUint(f[i+1], 10, 64)
				if err != nil {
					return CPUTimes{}, fmt.Errorf("%s: %w", ProcStat, err)
				}
				*p = n
			}
			found = true
		case strings.HasPrefix(f[0], "cpu"):
			t.CPUs++
		}
	}
	if !found || t.CPUs == 0 {
		return CPUTimes{}, fmt.Errorf("%s: no cpu lines", ProcStat)
	}
	return t, nil
}
