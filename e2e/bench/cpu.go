package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
)

// The node's CPU cost of a phase. kind's node is a container on this
// machine, so the machine's /proc/stat counts all the cluster's work: the
// kubelet's, the runtime's, the API server's, the NetworkPolicy engine's
// and the pods' own (and the bench's, which is small beside them). What a
// phase costs is its busy CPU time less what the machine spends at rest
// over as long.

// userHZ is the unit of exec.CPUTimes: USER_HZ, 100 on every Linux
// architecture kind runs on.
const userHZ = 100

// idleSpan is how long the machine's rest is measured.
const idleSpan = 10 * time.Second

// settle is how long a phase's cost is still counted after its last pod is
// gone from the API: the node tears a pod down after that (the runtime,
// the cgroups, the mounts), and that work is part of the pod's cost.
const settle = 10 * time.Second

// cpuTimes are the machine's CPU times so far, in CPU-seconds, from
// /proc/stat's "cpu" line. busy is user, nice, system, irq and softirq
// (guest time is within user already). steal is time the hypervisor gave
// another guest while this one had work: it is not the cluster's work, and
// on a shared VM it swings with the neighbours' load, so it is kept apart.
// idle is idle and iowait: time no one wanted the CPUs.
type cpuTimes struct {
	busy, steal, idle float64
}

func readCPUTimes() (cpuTimes, error) {
	t, err := exec.ReadCPUTimes()
	return inSeconds(t), err
}

// inSeconds sorts the machine's CPU times as cpuTimes does.
func inSeconds(t exec.CPUTimes) cpuTimes {
	secs := func(ticks uint64) float64 { return float64(ticks) / userHZ }
	return cpuTimes{busy: secs(t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ), steal: secs(t.Steal), idle: secs(t.Idle + t.IOWait)}
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{a.busy - b.busy, a.steal - b.steal, a.idle - b.idle}
}

func (a cpuTimes) add(b cpuTimes) cpuTimes {
	return cpuTimes{a.busy + b.busy, a.steal + b.steal, a.idle + b.idle}
}

// cpuMark is the machine's CPU times at a moment, and every process's.
type cpuMark struct {
	cpuTimes
	at    time.Time
	procs map[int]procTime
}

func markCPU() (cpuMark, error) {
	t, err := readCPUTimes()
	return cpuMark{t, time.Now(), readProcs()}, err
}

// cpuCost is what the machine spent since a mark beyond its rest (total),
// and which commands spent it; span is the machine's times meanwhile, in
// all.
type cpuCost struct {
	total float64
	span  cpuTimes
	by    map[string]float64 // CPU-seconds by command name
}

// costAfter is the cost since m beyond rest, read after wait so that work
// still under way counts.
func (m cpuMark) costAfter(ctx context.Context, rest cpuRest, wait time.Duration) (cpuCost, error) {
	select {
	case <-ctx.Done():
		return cpuCost{}, ctx.Err()
	case <-time.After(wait):
	}
	now, err := markCPU()
	if err != nil {
		return cpuCost{}, err
	}
	secs := now.at.Sub(m.at).Seconds()
	by := byCommand(m.procs, now.procs)
	for c, r := range rest.by {
		by[c] -= r * secs
	}
	span := now.cpuTimes.sub(m.cpuTimes)
	return cpuCost{span.busy - rest.cpus*secs, span, by}, nil
}

// cpuRest is what the machine keeps busy at rest: CPUs in all, and by
// command.
type cpuRest struct {
	cpus float64
	by   map[string]float64
}

// restCPU measures, once, how many CPUs the machine keeps busy at rest:
// the cluster with full pools and no requests.
func (b *Bench) restCPU(ctx context.Context) (cpuRest, error) {
	if b.rest.cpus > 0 {
		return b.rest, nil
	}
	if err := b.waitFull(ctx); err != nil {
		return cpuRest{}, err
	}
	m, err := markCPU()
	if err != nil {
		return cpuRest{}, err
	}
	c, err := m.costAfter(ctx, cpuRest{}, idleSpan)
	if err != nil {
		return cpuRest{}, err
	}
	secs := time.Since(m.at).Seconds()
	b.rest = cpuRest{cpus: c.total / secs, by: map[string]float64{}}
	for k, v := range c.by {
		b.rest.by[k] = v / secs
	}
	b.meta["CPUs busy at rest"] = fmt.Sprintf("%.2f", b.rest.cpus)
	return b.rest, nil
}

// cpuRow is a row of one figure: the CPU-seconds a phase cost per unit
// beyond rest, with the commands that spent the most of it.
func cpuRow(what string, c cpuCost, n int, rest cpuRest, how string) Row {
	return Row{What: what, Rate: fmt.Sprintf("%.2f CPU-s", c.total/float64(n)),
		Note: fmt.Sprintf("the machine's busy CPU time %s and %s after, less its rest (%.2f CPUs busy), over %d; by command, likewise, in CPU-s each: %s; %s",
			how, settle, rest.cpus, n, topCommands(c.by, topShown, n), c.timesNote(n))}
}

// timesNote says how much the hypervisor took meanwhile, per unit of per,
// and how much of the CPUs' time was idle.
func (c cpuCost) timesNote(per int) string {
	all := c.span.busy + c.span.steal + c.span.idle
	return fmt.Sprintf("steal, not counted: %.2f CPU-s each; the CPUs idle %.0f%% of the time", c.span.steal/float64(per), 100*c.span.idle/all)
}

// The CPU time of processes, from /proc/<pid>/stat.

// procTime is one process's command name and CPU time in clock ticks:
// its own, and that of the children it has reaped, so that short-lived
// processes (runc, a container's python3) still count, under their
// parent. The two are kept apart because the parent may be an init that
// did none of the work: the node's systemd reaps every pod's shim once it
// ends, and with it all that ran under it.
type procTime struct {
	comm        string
	own, reaped uint64
}

// reapedBy is what the reaped time of a command is shown as.
func reapedBy(comm string) string { return "reaped by " + comm }

// topShown is how many commands a row names.
const topShown = 8

// readProcs reads every live process's CPU time; processes that end
// while it reads are passed over.
func readProcs() map[int]procTime {
	out := map[int]procTime{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if p, err := parseProcStat(string(b)); err == nil {
			out[pid] = p
		}
	}
	return out
}

// parseProcStat reads the command name and utime + stime + cutime +
// cstime of a /proc/<pid>/stat line. The name is the text between the
// first "(" and the last ")", since it may hold either; a kernel worker's
// name, which says what it is doing at the moment, is cut to "kworker".
func parseProcStat(s string) (procTime, error) {
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procTime{}, fmt.Errorf("no command name in %q", s)
	}
	comm := s[open+1 : closing]
	if strings.HasPrefix(comm, "kworker/") {
		comm = "kworker"
	}
	// After the name: state (field 3) ... utime, stime, cutime, cstime
	// (fields 14 to 17).
	f := strings.Fields(s[closing+1:])
	if len(f) < 15 {
		return procTime{}, fmt.Errorf("short stat line %q", s)
	}
	var ticks [4]uint64
	for i, x := range f[11:15] {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return procTime{}, fmt.Errorf("stat line %q: %w", s, err)
		}
		ticks[i] = v
	}
	return procTime{comm, ticks[0] + ticks[1], ticks[2] + ticks[3]}, nil
}

// byCommand is the CPU-seconds each command name spent from a to b, and
// those its ended children spent (under reapedBy the name). A pid whose
// name changed in between is a new process.
func byCommand(a, b map[int]procTime) map[string]float64 {
	out := map[string]float64{}
	add := func(name string, now, was uint64) {
		if now > was {
			out[name] += float64(now-was) / userHZ
		}
	}
	for pid, p := range b {
		q, ok := a[pid]
		if !ok || q.comm != p.comm || q.own > p.own || q.reaped > p.reaped {
			q = procTime{}
		}
		add(p.comm, p.own, q.own)
		add(reapedBy(p.comm), p.reaped, q.reaped)
	}
	return out
}

// topCommands names the n commands that spent the most, each per unit of
// per.
func topCommands(by map[string]float64, n, per int) string {
	names := slices.Collect(maps.Keys(by))
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(by[y], by[x]), strings.Compare(x, y)) })
	var parts []string
	for _, name := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, by[name]/float64(per)))
	}
	return strings.Join(parts, ", ")
}
