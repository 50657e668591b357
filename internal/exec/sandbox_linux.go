package exec

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Isolated runs.
//
// A run with Options.Sandbox set does not start python3 directly. It starts
// this same binary (/proc/self/exe, so a binary replaced on disk meanwhile
// does not matter) as the init of fresh PID, mount, network, IPC and UTS
// namespaces; MaybeInit, which every such binary calls first thing, notices
// and becomes that init (sandbox_init.go). As root in its namespaces, and
// before any code of the run exists, it:
//
//   - makes every mount read-only, so that nothing the run writes outside
//     its own tmpfs mounts can outlive it or reach another run;
//   - mounts a fresh /proc, which shows the run's PID namespace alone;
//   - mounts size-bounded tmpfs on /tmp (which holds the working directory
//     and the code), /var/tmp and /dev/shm; they are visible only in this
//     mount namespace and vanish with its last process, so no cleanup ever
//     walks a tree the snippet shaped;
//   - makes the working directory, root's until the job is in it;
//   - tells serve it is ready, handing it a descriptor of the working
//     directory (from which the run's output files are read after the run,
//     see collect.go), and waits for serve to move it into the run's
//     cgroups;
//   - forks python3 as the run's own uid and gid with no supplementary
//     groups, no_new_privs and a seccomp filter that refuses new user
//     namespaces. python3 runs the preamble of a pre-started run
//     (prestart.go): it applies its limits, imports Options.Preload, and
//     waits on its own socket to serve for the code, which is all it can
//     do before its job: nothing of the job exists yet.
//
// When the job comes (Interp.Run), serve sends the init the code and the
// files, which it writes, still root, into the working directory, where
// no link or FIFO can be waiting, before it gives the directory to the
// run's uid; only then does serve send python3 the code. The init stays
// its namespace's PID 1, reaps what the kernel hands it, and exits with
// python3's status when python3 ends, which ends every other process of
// the namespace. A run started for its job is such a run handed its job at
// once, so every isolated run takes the same path.
//
// The alternative of starting python3 straight from a thread that unshared
// its mount namespace cannot give a /proc of the new PID namespace (only a
// process inside it can mount one), nor no_new_privs and seccomp (os/exec
// has no hook between fork and exec); bubblewrap could, but is one more
// package that a fresh machine does not have, and the memory and process
// bounds (cgroups) would still be ours.

// Sandbox asks Run to isolate a run; see the comment above. It needs root.
type Sandbox struct {
	// UID and GID are the run's own, from a range nothing else uses, so that
	// no other run can signal it, read its memory, or share its process
	// count (RLIMIT_NPROC is per uid).
	UID, GID uint32
	// DiskLimit is the size of each tmpfs (/tmp with the working directory,
	// /var/tmp, /dev/shm) in bytes; 0 means DefaultDiskLimit. Pages in them
	// count against the run's memory cgroup too.
	DiskLimit int64
	// Cgroups is where the run's own memory and pids cgroups are made; nil
	// means none (the rlimits are then the only bounds).
	Cgroups *CgroupParent
	// MemoryLimit bounds the run's memory cgroup in bytes; 0 means no bound
	// beyond the host's (the cgroup still counts the run's OOM kills).
	MemoryLimit int64
	// NoSeccomp leaves out the filter that refuses new user namespaces; for
	// the tests' positive controls only.
	NoSeccomp bool
}

// Paths inside an isolated run.
const (
	// SandboxDir is the working directory (and HOME) of an isolated run.
	SandboxDir = "/tmp/work"
	// sandboxSnippet holds the code: outside the working directory, so the
	// run's own files are exactly Job.Files, and owned by root, read-only.
	sandboxSnippet = "/tmp/sandbox-snippet.py"
	// initArg0 is the argv[0] by which MaybeInit knows it is a run's init.
	initArg0 = "sandbox-init"
	// initFD is where the init finds its socket to serve, and initCtlFD
	// the socket python3 gets as its ctlFD.
	initFD    = 3
	initCtlFD = 4
)

// DefaultDiskLimit bounds each of an isolated run's tmpfs mounts: above the
// 100 MiB file-size limit, so the largest file allowed fits, and
// memory-backed, so also bounded by the memory cgroup.
const DefaultDiskLimit = 128 << 20

// sandboxInodes bounds the files of each tmpfs: far above what a snippet
// makes, and each inode costs kernel memory.
const sandboxInodes = 1 << 18

var hooked atomic.Bool

// MaybeInit must run first in every binary that makes isolated runs: the
// first statement of main, or of TestMain in a test binary; never in a
// package init, so that a reader of main sees it. In a run's init process
// it sets up the sandbox, runs python3 and waits for it, and returns with
// isInit true and the status the process must exit with at once, printing
// nothing: python3's (its exit code, or 128 plus the signal that killed
// it), or 127 when the set-up failed (the error already went to serve).
// Everywhere else it returns false and records that isolated runs are
// possible, so that a binary without the hook is refused rather than
// started again as a run's init.
func MaybeInit() (isInit bool, status int) {
	if len(os.Args) == 0 || os.Args[0] != initArg0 {
		hooked.Store(true)
		return false, 0
	}
	return true, sandboxInit()
}

func (s *Sandbox) diskLimit() int64 {
	if s.DiskLimit > 0 {
		return s.DiskLimit
	}
	return DefaultDiskLimit
}

// sandboxCloneflags are the namespaces of an isolated run: no network at all
// (not even loopback is up), its own PIDs, mounts, IPC and host name.
const sandboxCloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// checkSandbox reports why this process cannot make isolated runs.
func checkSandbox(s *Sandbox) error {
	switch {
	case !hooked.Load():
		return errors.New("isolated run: this binary does not call exec.MaybeInit first")
	case os.Geteuid() != 0:
		return errors.New("isolated run: needs root")
	case s.UID == 0 || s.GID == 0:
		return fmt.Errorf("isolated run: uid %d gid %d: must not be root", s.UID, s.GID)
	}
	return nil
}

// setupTimeout bounds an isolated run's set-up (the mounts, the cgroup
// moves, python3's fork) and, apart, the writing of its job (at most
// MaxFilesBytes through a local socket). Each takes a few milliseconds; a
// run that has not done it by then never will.
const setupTimeout = 10 * time.Second

// sandboxStart is serve's side of an isolated run's init.
type sandboxStart struct {
	parent, child *os.File // the socket to the init: ours, and its end until it has started
	rr            *rightsReader
	r             *bufio.Reader
	cg            *runCgroup // nil without cgroups
	cfg           initConfig
	// workDir is the run's working directory, as the init opened it; nil
	// until the init is ready.
	workDir *os.File
}

// prepareSandbox turns cmd into the start of the run's init, which passes
// cmd's one extra file (the socket python3 waits on) on to python3, and
// makes the run's cgroups, in which it weighs as little as the host allows
// until its job comes (see wake).
func prepareSandbox(cmd *osexec.Cmd, opts Options, python string, args, env []string) (*sandboxStart, error) {
	s := opts.Sandbox
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	// Non-blocking, so that deadlines bound every read and write.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("run: %w", err)
	}
	sb := &sandboxStart{
		parent: os.NewFile(uintptr(fds[0]), "sandbox-init"),
		child:  os.NewFile(uintptr(fds[1]), "sandbox-init"),
		cfg: initConfig{UID: s.UID, GID: s.GID, DiskLimit: s.diskLimit(), Python: python, Args: args, Env: env,
			Seccomp: !s.NoSeccomp},
	}
	sb.rr = &rightsReader{f: sb.parent}
	sb.r = bufio.NewReaderSize(sb.rr, 4096)
	if s.Cgroups != nil {
		// The pids bound leaves room for the init's own threads: python3's
		// RLIMIT_NPROC, per run uid, is the snippet's bound.
		if sb.cg, err = s.Cgroups.newRun(s.MemoryLimit, opts.maxProcs()+initThreads); err != nil {
			sb.close()
			return nil, fmt.Errorf("run: %w", err)
		}
		sb.cg.idle()
	}
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{initArg0}
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.ExtraFiles = append([]*os.File{sb.child}, cmd.ExtraFiles...) // initFD, initCtlFD
	cmd.SysProcAttr.Cloneflags = sandboxCloneflags
	cmd.SysProcAttr.Credential = nil
	return sb, nil
}

// initThreads is what a run's pids cgroup allows beyond its python3's
// process limit, for the init that stays its PID 1: the Go runtime's few
// threads, which a snippet at its limit must not keep from starting.
const initThreads = 16

// started drops our copy of the init's end of the socket, so that the
// init's end is the only one.
func (sb *sandboxStart) started() {
	sb.child.Close()
	sb.child = nil
}

// setup sends the init its configuration, moves it into the run's cgroups
// once it is ready, lets it go, and returns when python3 has been forked.
func (sb *sandboxStart) setup(ctx context.Context, pid int) error {
	sb.parent.SetDeadline(time.Now().Add(setupTimeout))
	stop := context.AfterFunc(ctx, func() { sb.parent.SetDeadline(time.Now()) })
	defer stop()
	defer func() { sb.workDir = sb.rr.take() }()
	// The init reads the whole configuration before it answers; if it fails
	// early the write fails too, and its answer says why.
	werr := writeJob(sb.parent, sb.cfg, nil)
	line, err := sb.r.ReadString('\n')
	if err == nil && line == initReady {
		if werr != nil {
			return fmt.Errorf("run: send sandbox init its configuration: %w", werr)
		}
		if sb.cg != nil {
			if err := sb.cg.place(pid); err != nil {
				return fmt.Errorf("run: %w", err)
			}
		}
		if _, err := sb.parent.Write([]byte{initGo}); err != nil {
			return fmt.Errorf("run: start sandbox: %w", err)
		}
		if line, err = sb.r.ReadString('\n'); err == nil && line == initStarted {
			return nil
		}
	}
	return sb.answerErr(ctx, line, err)
}

// sendJob sends the init the job's code and files and returns once it has
// written them and given the working directory to the run.
func (sb *sandboxStart) sendJob(ctx context.Context, job Job) error {
	sb.parent.SetDeadline(time.Now().Add(setupTimeout))
	stop := context.AfterFunc(ctx, func() { sb.parent.SetDeadline(time.Now()) })
	defer stop()
	werr := writeJob(sb.parent, initConfig{Code: job.Code}, job.Files)
	line, err := sb.r.ReadString('\n')
	if err == nil && line == initWritten {
		if werr != nil {
			return fmt.Errorf("run: send sandbox init the job: %w", werr)
		}
		return nil
	}
	return sb.answerErr(ctx, line, err)
}

// answerErr turns the init's answer other than the one expected into an
// error: the job's fault (ErrInvalidJob), the host's, or a cut socket.
func (sb *sandboxStart) answerErr(ctx context.Context, line string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("run cancelled: %w", context.Cause(ctx))
	case strings.HasPrefix(line, initErrJob):
		return fmt.Errorf("%w: %s", ErrInvalidJob, strings.TrimSpace(strings.TrimPrefix(line, initErrJob)))
	case strings.HasPrefix(line, initErrHost):
		return fmt.Errorf("run: sandbox init: %s", strings.TrimSpace(strings.TrimPrefix(line, initErrHost)))
	case err != nil:
		return fmt.Errorf("run: sandbox init: %w", err)
	}
	return fmt.Errorf("run: sandbox init: unexpected %q", line)
}

// close releases the socket and removes the run's cgroups; the run's
// processes must be gone. A cgroup that cannot be removed is left for the
// host's tools: nothing here can log. A second call does nothing.
func (sb *sandboxStart) close() {
	if sb.child != nil {
		sb.child.Close()
		sb.child = nil
	}
	if sb.workDir != nil {
		// First: while it is open the run's tmpfs lives on, charged to
		// the cgroup removed below.
		sb.workDir.Close()
		sb.workDir = nil
	}
	sb.parent.Close()
	if sb.cg != nil {
		_ = sb.cg.remove()
		sb.cg = nil
	}
}

// The uids of isolated runs: the top 2^24 below 2^31, far above the ids of
// users, system accounts and the usual subordinate ranges (from 100000 in
// steps of 65536), and never 65534. Kubernetes pods on the same host draw
// from [100000, 2^31-2] at random and may rarely coincide.
const (
	MinSandboxUID = 1<<31 - 1<<24
	MaxSandboxUID = 1<<31 - 2
)

// RandomSandboxUID returns a uid in [MinSandboxUID, MaxSandboxUID] from a
// secure source, so that runs cannot predict one another's.
func RandomSandboxUID() uint32 {
	var b [4]byte
	rand.Read(b[:]) // never fails on Linux (Go 1.24+)
	return MinSandboxUID + binary.LittleEndian.Uint32(b[:])%(MaxSandboxUID-MinSandboxUID+1)
}

// rightsReader reads the init's socket with recvmsg, keeping the
// descriptors that come with the bytes (the init's working directory comes
// with its ready line).
type rightsReader struct {
	f   *os.File
	fds []int
}

func (rr *rightsReader) Read(p []byte) (int, error) {
	rc, err := rr.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	oob := make([]byte, syscall.CmsgSpace(4*4))
	err = rc.Read(func(fd uintptr) bool {
		var oobn int
		n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), p, oob, syscall.MSG_CMSG_CLOEXEC)
		if rerr == syscall.EAGAIN {
			return false
		}
		if rerr == nil && oobn > 0 {
			msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				fds, _ := syscall.ParseUnixRights(&m)
				rr.fds = append(rr.fds, fds...)
			}
		}
		return true
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// take returns the first descriptor received as a directory, closing any
// other: the init sends exactly one.
func (rr *rightsReader) take() *os.File {
	var dir *os.File
	for i, fd := range rr.fds {
		if i == 0 {
			dir = os.NewFile(uintptr(fd), SandboxDir)
			continue
		}
		syscall.Close(fd)
	}
	rr.fds = nil
	return dir
}
