package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Killing a whole run.
//
// A run's processes can leave its process group (setpgid, setsid) and their
// parents can exit, so neither the group nor the parent chain of the moment
// finds them all. Run therefore makes this process a child subreaper
// (PR_SET_CHILD_SUBREAPER; in a pod the runner is PID 1, which has the same
// effect): every orphan of a run is reparented here rather than to init, so
// every process a run started is, at every moment, a descendant of this
// process. At the deadline, and again after the child exits normally, sweep
// walks that tree through /proc and SIGKILLs it, repeating until nothing is
// left and reaping the orphans that became our children. A PID namespace's
// init (the runner in a pod) needs no walk: it kills the whole namespace at
// once and only reaps (reapAll).
//
// Several runs may share one process (the local backend). Their direct
// children are registered in live, under a lock also held across
// cmd.Start, so a sweep never mistakes another run's child for an orphan.
// An orphan cannot be attributed to its run any more, so a sweep kills every
// orphan it finds: a run's daemonised processes may die when a concurrent
// run ends, never later than their own run's end. This process must not
// start other children of its own while it uses Run.

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

var (
	subreaperOnce sync.Once
	errSubreaper  error
)

// becomeSubreaper marks this process a child subreaper, once.
func becomeSubreaper() error {
	subreaperOnce.Do(func() {
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
			errSubreaper = fmt.Errorf("become child subreaper: %w", e)
		}
	})
	return errSubreaper
}

// live holds the pids of the runs' direct children while os/exec still
// waits for them.
var live = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// sweepRoundLimit bounds how long a sweep keeps killing: a tree that is still
// not empty after this many rounds holds a process we cannot kill.
const sweepRoundLimit = 2000

// deathGrace is how long a runner that is its PID namespace's init waits
// for the processes it has killed to exit before it answers. By then each
// has a SIGKILL pending and can never run its own code again; what is left
// is their exit, which needs the CPU. A snippet's processes run in
// SCHED_IDLE, so a thousand of them, killed, get it only while the runner
// sleeps, and on a busy node they may take many seconds. They do not hold
// the answer up past this: they end with the pod, whose init exits next.
const deathGrace = time.Second

// sweep kills every process descended from this one except the trees of
// other live runs' children. own, when not 0, is the live child of the
// calling run: it is killed too but left for os/exec to reap, and the sweep
// ends when only it remains. A PID namespace's init reaps instead (see
// reapAll), so own must be 0 there; settled is false only then, when killed
// processes were still exiting at ctx's end.
func sweep(ctx context.Context, own int) (settled bool, err error) {
	if os.Getpid() == 1 {
		return reapAll(ctx)
	}
	return true, walkAndKill(ctx, own)
}

// killAll, in a PID namespace's init, SIGKILLs every other process of the
// namespace. In a pod the runner is that init and runs one job, so every
// other process there is the run's. kill(-1) signals them all in one pass
// that new forks cannot join (the kernel fails a fork whose parent has a
// fatal signal pending), so a fork bomb that refills its tree faster than a
// walk can kill it still dies at once. The kernel spares the caller.
func killAll() {
	_ = syscall.Kill(-1, syscall.SIGKILL)
}

// reapAll kills every other process of the namespace (see killAll) and
// reaps them as they exit, until none is left or ctx ends. It never walks
// /proc: one wait4 per exited process, and sleep between, so that the
// runner leaves the CPU to the processes whose exit it waits for. Every
// process of the namespace descends from its init, so when the init has no
// children left (ECHILD) nothing else of the run exists. It must not run
// while os/exec still waits for one of this process's children.
func reapAll(ctx context.Context) (settled bool, err error) {
	killAll()
	pause := 100 * time.Microsecond
	for {
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG|syscall.WALL, nil)
			switch {
			case errors.Is(err, syscall.ECHILD):
				return true, nil
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil:
				return false, fmt.Errorf("reap the run's processes: %w", err)
			}
			if pid == 0 {
				break // some left, none exited since
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
		pause = min(2*pause, 5*time.Millisecond)
	}
}

// walkAndKill kills the tree through /proc, round after round, until it is
// empty (see sweep).
func walkAndKill(ctx context.Context, own int) error {
	self := os.Getpid()
	live.Lock()
	defer live.Unlock()
	pause := 50 * time.Microsecond
	for range sweepRoundLimit {
		tops, err := childrenOf(self)
		if err != nil {
			return err
		}
		var targets []int
		for _, c := range tops {
			if c != own && live.pids[c] {
				continue
			}
			targets, err = appendTree(targets, c)
			if err != nil {
				return err
			}
		}
		if len(targets) == 0 || (len(targets) == 1 && targets[0] == own) {
			return nil
		}
		for _, p := range targets {
			_ = syscall.Kill(p, syscall.SIGKILL) // ESRCH: already gone
		}
		for _, c := range tops {
			if c == own || live.pids[c] {
				continue
			}
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(c, &ws, syscall.WNOHANG, nil) // ECHILD: reaped
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("kill process tree: %w", context.Cause(ctx))
		case <-t.C:
		}
		pause = min(2*pause, 10*time.Millisecond)
	}
	return errors.New("kill process tree: processes survive SIGKILL")
}

// appendTree appends pid and all its descendants.
func appendTree(dst []int, pid int) ([]int, error) {
	start := len(dst)
	dst = append(dst, pid)
	for i := start; i < len(dst); i++ {
		kids, err := childrenOf(dst[i])
		if err != nil {
			return dst, err
		}
		dst = append(dst, kids...)
	}
	return dst, nil
}

// childrenOf lists pid's children from /proc/PID/task/*/children
// (CONFIG_PROC_CHILDREN), which costs a few small reads per process instead
// of a scan of every process on the machine. A process that is gone has no
// children.
func childrenOf(pid int) ([]int, error) {
	taskDir := "/proc/" + strconv.Itoa(pid) + "/task"
	d, err := os.Open(taskDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, nil
		}
		return nil, fmt.Errorf("list children of %d: %w", pid, err)
	}
	tids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, nil // the process went away while we read
	}
	var kids []int
	for _, tid := range tids {
		b, err := os.ReadFile(taskDir + "/" + tid + "/children")
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && tid == strconv.Itoa(pid) && !procChildrenExists() {
				return nil, errors.New("list children: /proc/PID/task/TID/children is missing (kernel without CONFIG_PROC_CHILDREN)")
			}
			continue // thread exited
		}
		for f := range strings.FieldsSeq(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids, nil
}

func procChildrenExists() bool {
	_, err := os.Stat("/proc/thread-self/children")
	return err == nil
}
