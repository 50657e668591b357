package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The node's CPU cost of a phase. kind's node is a container on this
// machine, so the machine's /proc/stat counts all the cluster's work: the
// kubelet's, the runtime's, the API server's, the NetworkPolicy engine's
// and the pods' own (and the bench's, which is small beside them). What a
// phase costs is its busy CPU time less what the machine spends at rest
// over as long.

// userHZ is the unit of /proc/stat: USER_HZ, 100 on every Linux
// architecture kind runs on.
const userHZ = 100

// idleSpan is how long the machine's rest is measured.
const idleSpan = 10 * time.Second

// settle is how long a phase's cost is still counted after its last pod is
// gone from the API: the node tears a pod down after that (the runtime,
// the cgroups, the mounts), and that work is part of the pod's cost.
const settle = 10 * time.Second

// busySeconds reads the machine's busy CPU time so far, in CPU-seconds.
func busySeconds() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseBusy(string(b))
}

// parseBusy sums the busy fields of /proc/stat's "cpu" line: user, nice,
// system, irq, softirq and steal (guest time is within user already; idle
// and iowait are not busy).
func parseBusy(stat string) (float64, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q is not the cpu totals", line)
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: field %d of %q: %w", i, line, err)
		}
		busy += v
	}
	return float64(busy) / userHZ, nil
}

// cpuMark is the machine's busy time at a moment.
type cpuMark struct {
	busy float64
	at   time.Time
}

func markCPU() (cpuMark, error) {
	busy, err := busySeconds()
	return cpuMark{busy, time.Now()}, err
}

// beyondRest is the busy CPU-seconds since m beyond rest CPUs busy.
func (m cpuMark) beyondRest(rest float64) (float64, error) {
	return m.beyondRestAfter(context.Background(), rest, 0)
}

// beyondRestAfter is beyondRest read after wait, so that work still under
// way counts.
func (m cpuMark) beyondRestAfter(ctx context.Context, rest float64, wait time.Duration) (float64, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(wait):
	}
	now, err := markCPU()
	if err != nil {
		return 0, err
	}
	return now.busy - m.busy - rest*now.at.Sub(m.at).Seconds(), nil
}

// restCPU measures, once, how many CPUs the machine keeps busy at rest:
// the cluster with full pools and no requests.
func (b *Bench) restCPU(ctx context.Context) (float64, error) {
	if b.rest > 0 {
		return b.rest, nil
	}
	if err := b.waitFull(ctx); err != nil {
		return 0, err
	}
	m, err := markCPU()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(idleSpan):
	}
	busy, err := m.beyondRest(0)
	if err != nil {
		return 0, err
	}
	b.rest = busy / time.Since(m.at).Seconds()
	b.meta["CPUs busy at rest"] = fmt.Sprintf("%.2f", b.rest)
	return b.rest, nil
}

// cpuRow is a row of one figure: the CPU-seconds a phase cost per unit
// beyond rest.
func cpuRow(what string, cost float64, n int, rest float64, how string) Row {
	return Row{What: what, Rate: fmt.Sprintf("%.2f CPU-s", cost/float64(n)),
		Note: fmt.Sprintf("the machine's busy CPU time %s and %s after, less its rest (%.2f CPUs busy), over %d", how, settle, rest, n)}
}
