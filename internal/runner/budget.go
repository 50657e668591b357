//go:build linux

package runner

import (
	"fmt"

	"github.com/sandboxd/sandbox/internal/exec"
)

// The pod's shared budgets, and how the runner keeps its part.
//
// The runner and the snippet run as one uid in one pod, so they share the
// pod's pids cgroup (the kubelet's podPidsLimit), its memory limit, and the
// uid's task count. A snippet that used up the pids cgroup would leave the
// Go runtime unable to start a thread, and the runner would die with the
// job unanswered. So the snippet's RLIMIT_NPROC is set below the pod's pids
// limit: the kernel checks RLIMIT_NPROC against every task of the uid,
// runner threads included, when the snippet forks or starts a thread, while
// the runner itself has no such limit and may use the difference. Memory:
// the snippet raises its own oom_score_adj to the maximum (exec's preamble),
// so the kernel's OOM killer takes a snippet process first. File
// descriptors are counted per process, so the snippet's cannot exhaust the
// runner's. CPU: the snippet runs at the lowest priority (snippetNice) and
// in SCHED_IDLE, so a snippet that keeps every CPU busy, with as many
// processes as it may have, still leaves the runner the time to kill it at
// the deadline.

// snippetNice is the snippet's nice value in a pod: the lowest priority.
// Only the runner shares the pod's CPU cgroup with it, so this costs the
// snippet nothing unless the runner needs the CPU.
const snippetNice = 19

// runnerReserve is the part of the pod's pids limit the snippet may not
// take: the Go runtime's threads (a handful, more while syscalls block) and
// the pause process, with a wide margin.
const runnerReserve = 64

// procBudget returns the snippet's RLIMIT_NPROC: want (exec's default when
// 0), lowered to leave runnerReserve tasks of the pod's pids limit to the
// runner. pidsMax is that limit; 0 means none is known.
func procBudget(want int, pidsMax int64) (int, error) {
	if want <= 0 {
		want = exec.DefaultMaxProcs
	}
	if pidsMax <= 0 {
		return want, nil
	}
	if pidsMax <= 2*runnerReserve {
		return 0, fmt.Errorf("the pod's pids limit %d leaves no room for a snippet beside the runner's reserve of %d tasks; "+
			"raise the kubelet's podPidsLimit", pidsMax, runnerReserve)
	}
	return min(want, int(pidsMax)-runnerReserve), nil
}
