package exec

import "time"

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

// WhenCPUIdle returns a PreloadGate that lets each step begin once a window
// of the given length has seen the machine's CPUs idle for a CPU's worth,
// measuring window after window until then or until stop. When the CPU
// times cannot be read it lets the step go: the preload is a speed-up,
// never a condition.
func WhenCPUIdle(window time.Duration) func(stop <-chan struct{}) bool {
	return cpuGate(ReadCPUTimes, window)
}

// cpuGate is WhenCPUIdle reading the CPU times with read.
func cpuGate(read func() (CPUTimes, error), window time.Duration) func(stop <-chan struct{}) bool {
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
			if err != nil || idleCPUs(before, after) >= min(1, float64(after.CPUs)/2) {
				return true
			}
		}
	}
}

// idleCPUs is how many CPUs' worth were idle (idle or waiting for I/O)
// between before and after.
func idleCPUs(before, after CPUTimes) float64 {
	idle := func(t CPUTimes) uint64 { return t.Idle + t.IOWait }
	total := func(t CPUTimes) uint64 {
		return t.User + t.Nice + t.System + t.Idle + t.IOWait + t.IRQ + t.SoftIRQ + t.Steal
	}
	if total(after) <= total(before) || idle(after) < idle(before) {
		return 0
	}
	return float64(idle(after)-idle(before)) / float64(total(after)-total(before)) * float64(after.CPUs)
}
