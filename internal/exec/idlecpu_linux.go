package exec

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// A preload that yields.
//
// Importing the data stack costs a warm interpreter about a CPU-second
// (docs/runner.md). On a node where pods are being started for a burst of
// jobs, that second comes out of the starts and the jobs: on kind's two
// cores, a burst of 30 with every new pod preloading saw 503s that the same
// burst without a preload did not. A pod claimed at once gains nothing from
// a preload it has no time to finish, and one that waits is better off
// preloading once the node has CPU to spare. So the runner's preload takes
// each step only when, over the window just before it, the machine's CPUs
// were idle for a CPU's worth (half of one on a one-CPU machine), the CPU a
// step keeps busy: a node with one to spare lends it, a busy one keeps it
// (half a CPU's worth let more of a burst's pods preload: docs/speed.md).
// The count is the machine's (/proc/stat is not the container's), which is
// what the pods compete for; the window falls between steps, so the
// interpreter's own imports are not in it.

// procStat is where the machine's CPU times are read.
const procStat = "/proc/stat"

// WhenCPUIdle returns a PreloadGate that lets each step begin once a window
// of the given length has seen the machine's CPUs idle for a CPU's worth,
// measuring window after window until then or until stop. When the CPU
// times cannot be read it lets the step go: the preload is a speed-up,
// never a condition.
func WhenCPUIdle(window time.Duration) func(stop <-chan struct{}) bool {
	return cpuGate(func() (cpuTimes, error) { return readCPUTimes(procStat) }, window)
}

// cpuGate is WhenCPUIdle reading the CPU times with read.
func cpuGate(read func() (cpuTimes, error), window time.Duration) func(stop <-chan struct{}) bool {
	return func(stop <-chan struct{}) bool {
		for {
			before, err := read()
			if err != nil {
				return true
			}
			select {
			case <-stop:
				return false
			case <-time.After(window):
			}
			after, err := read()
			if err != nil || after.idleCPUs(before) >= min(1, float64(after.cpus)/2) {
				return true
			}
		}
	}
}

// cpuTimes are the machine's CPU times, in clock ticks, as /proc/stat's
// first line counts them.
type cpuTimes struct {
	idle, total uint64 // idle counts iowait too
	cpus        int    // the cpuN lines
}

// idleCPUs is how many CPUs' worth were idle between earlier and t.
func (t cpuTimes) idleCPUs(earlier cpuTimes) float64 {
	total := t.total - earlier.total
	if total == 0 || t.total < earlier.total || t.idle < earlier.idle {
		return 0
	}
	return float64(t.idle-earlier.idle) / float64(total) * float64(t.cpus)
}

func readCPUTimes(path string) (cpuTimes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(b)
}

// parseCPUTimes reads /proc/stat: the "cpu" line's user, nice, system,
// idle, iowait, irq, softirq and steal (guest time is in user already).
func parseCPUTimes(b []byte) (cpuTimes, error) {
	var t cpuTimes
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case f[0] == "cpu":
			if len(f) < 5 {
				return cpuTimes{}, fmt.Errorf("%s: a cpu line of %d fields", procStat, len(f))
			}
			for i, v := range f[1:min(len(f), 9)] {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return cpuTimes{}, fmt.Errorf("%s: %w", procStat, err)
				}
				t.total += n
				if i == 3 || i == 4 {
					t.idle += n
				}
			}
			found = true
		case strings.HasPrefix(f[0], "cpu"):
			t.cpus++
		}
	}
	if !found || t.cpus == 0 {
		return cpuTimes{}, fmt.Errorf("%s: no cpu lines", procStat)
	}
	return t, nil
}
