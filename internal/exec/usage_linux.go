package exec

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"github.com/sandboxd/sandbox/wire"
)

// How a run's wire.Usage is counted.
//
// CPU time and peak memory come from the resource usage the kernel reports
// when a process is reaped, which includes everything that process had
// reaped in turn. In a pod the runner is its PID namespace's init and
// reaps every orphan, so its own count of reaped children
// (getrusage(RUSAGE_CHILDREN)) holds the whole tree, less the processes
// of a killed run that were still exiting when the answer went (see
// deathGrace). Elsewhere (the local
// backend) the first process is the init of a PID namespace of its own,
// whose processes are reaped into it before it is reaped itself: an
// isolated run's init (this binary, which waits for python3 and every
// orphan, and ends with python3), or in the weaker modes python3 itself. So
// its usage holds the whole tree too; a run without its own PID namespace
// (isolation none) loses the usage of the processes that outlived their
// parents. An isolated run's CPU time also counts its init's: this
// binary's start, some tens of milliseconds. A pre-started python3's counts
// include its own start and its preload, before the job, as they did when
// it was started for the job.
//
// Peak memory is the largest resident set of any one process of the run
// (ru_maxrss), not their sum: the kernel keeps no peak of a tree. A run's
// own memory cgroup does keep one, but it counts the page cache the run
// happens to read first (a library's pages are charged to whichever run
// loads them first) and its tmpfs files, so one snippet would report a
// different peak from one run to the next.
//
// Peak memory also counts, for the run's first process, the peak of the
// process it was started from: the kernel carries a process's peak across
// exec, and python3 is exec'd in a child that shares the runner's memory
// (Go starts children with vfork). So max_rss_kib is never below that:
// some 35 MiB. An isolated run's first process is its init, whose usage
// holds its own peak and python3's, the larger of the two.
//
// Processes counts the processes and threads the run started (each takes a
// PID): where the runner is its PID namespace's init (a pod), the
// namespace's last PID after the run less python3's, plus one, less the
// runner's own threads started meanwhile. The local backend cannot read the last PID of
// a run's namespace (the kernel shows only the reader's own), and reports 0.

// usageBase is what the counters said before the run's first process.
type usageBase struct {
	init     bool           // this process is its PID namespace's init (a pod)
	children syscall.Rusage // RUSAGE_CHILDREN, when init
	lastPID  int64          // the namespace's last PID, or -1
	threads  int64          // this process's threads
}

// usageBaseline reads the counters; call it just before the run's first
// process starts.
func usageBaseline() usageBase {
	b := usageBase{init: os.Getpid() == 1, lastPID: -1}
	if b.init {
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &b.children)
		b.lastPID = readInt("/proc/sys/kernel/ns_last_pid")
		b.threads = ownThreads()
	}
	return b
}

// measure returns the run's usage once every process of it has been
// reaped; ps is its first process's, nil when it never started.
func (b usageBase) measure(ps *os.ProcessState) wire.Usage {
	var u wire.Usage
	var ru syscall.Rusage
	switch {
	case b.init:
		if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
			return u
		}
		u.CPUMS = cpuMS(&ru) - cpuMS(&b.children)
		u.MaxRSSKiB = ru.Maxrss
		if b.lastPID >= 0 {
			if last := readInt("/proc/sys/kernel/ns_last_pid"); last >= 0 {
				// From python3's own PID on: the runtime may start a process
				// of its own before the first child (Go checks once whether
				// clone gives a pidfd).
				first := b.lastPID
				if ps != nil {
					first = int64(ps.Pid()) - 1
				}
				u.Processes = max(pidsBetween(first, last)-max(ownThreads()-b.threads, 0), 1)
			}
		}
	case ps != nil:
		if r, ok := ps.SysUsage().(*syscall.Rusage); ok {
			u.CPUMS = cpuMS(r)
			u.MaxRSSKiB = r.Maxrss
		}
	}
	u.CPUMS = max(u.CPUMS, 0)
	u.Processes = max(u.Processes, 0)
	return u
}

func cpuMS(r *syscall.Rusage) int64 {
	us := r.Utime.Sec*1e6 + r.Utime.Usec + r.Stime.Sec*1e6 + r.Stime.Usec
	return int64(us) / 1000
}

// pidsBetween is how many PIDs were handed out from after before to last,
// allowing for one wrap: past pid_max the kernel starts again at 300.
func pidsBetween(before, last int64) int64 {
	if last >= before {
		return last - before
	}
	max := readInt("/proc/sys/kernel/pid_max")
	if max <= 300 {
		return 0
	}
	return max - before + last - 300
}

// ownThreads is this process's number of threads, from /proc.
func ownThreads() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nThreads:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// readInt reads a file holding one integer, or returns -1.
func readInt(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}
