package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrInvalidJob marks a job Run refuses before starting anything: a bad file
// path, too many files, too many bytes. Callers answer it with a 4xx.
var ErrInvalidJob = errors.New("invalid job")

// Time Run allows for cleaning up after the child has exited.
const (
	// sweepTimeout bounds the kill sweep; a tree that outlives it holds a
	// process we are not allowed to kill.
	sweepTimeout = 5 * time.Second
	// drainTimeout bounds reading the pipes after the sweep, for a writer
	// the sweep could not reach (one that escaped into another PID namespace
	// through a setuid helper, say).
	drainTimeout = 2 * time.Second
)

// Run runs job.Code with python3 in opts.Dir and reports what it did. It
// returns an error, with a Result as complete as it could make, only when it
// could not run the job (an invalid job wraps ErrInvalidJob) or ctx ended
// first; the snippet failing is a Result with a non-zero ExitCode.
//
// When Run returns, every process the snippet started is dead, whether it
// timed out or exited. Result.SandboxID is left for the caller.
func Run(ctx context.Context, job Job, opts Options) (Result, error) {
	if opts.Sandbox != nil {
		return runSandboxed(ctx, job, opts)
	}
	if opts.Dir == "" {
		return Result{}, errors.New("run: no working directory")
	}
	// HOME and the child's cwd must not depend on ours.
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return Result{}, fmt.Errorf("run: %w", err)
	}
	opts.Dir = dir
	if err := checkFiles(job.Files); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	timeout := job.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	env := opts.Env
	if env == nil {
		env = DefaultEnv(opts.Dir)
	}
	python, err := findPython(opts.Python, env)
	if err != nil {
		return Result{}, err
	}
	var owner *[2]int
	if c := opts.Credential; c != nil {
		owner = &[2]int{int(c.Uid), int(c.Gid)}
	}
	// The snippet lives outside the working directory, so that the
	// snippet's own files are exactly Job.Files. A new file in TMPDIR, not a
	// directory of its own: on ext4 a directory costs half a millisecond.
	snippet, err := writeSnippet(job.Code, owner)
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(snippet)
	if owner != nil {
		if err := os.Lchown(opts.Dir, owner[0], owner[1]); err != nil {
			return Result{}, fmt.Errorf("run: %w", err)
		}
	}
	if err := writeFiles(opts.Dir, job.Files, owner); err != nil {
		if isHostFault(err) {
			return Result{}, fmt.Errorf("run: %w", err)
		}
		// A path through a symlink out of Dir, a file where a directory
		// must go: the job's fault.
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if err := becomeSubreaper(); err != nil {
		return Result{}, fmt.Errorf("run: %w", err)
	}
	return start(ctx, opts, timeout, python, pythonArgs(opts, snippet), env, nil)
}

// runSandboxed is Run for an isolated run: the init writes the code and the
// files inside the sandbox, so nothing is written on the host.
func runSandboxed(ctx context.Context, job Job, opts Options) (Result, error) {
	if err := checkSandbox(opts.Sandbox); err != nil {
		return Result{}, err
	}
	if err := checkFiles(job.Files); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	timeout := job.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	opts.Dir = SandboxDir
	env := opts.Env
	if env == nil {
		env = DefaultEnv(SandboxDir)
	}
	python, err := findPython(opts.Python, env)
	if err != nil {
		return Result{}, err
	}
	if err := becomeSubreaper(); err != nil {
		return Result{}, fmt.Errorf("run: %w", err)
	}
	return start(ctx, opts, timeout, python, pythonArgs(opts, sandboxSnippet), env, &job)
}

// writeSnippet writes code to a new private file and gives it to owner.
func writeSnippet(code string, owner *[2]int) (string, error) {
	f, err := os.CreateTemp("", "sandbox-snippet-*.py")
	if err != nil {
		return "", fmt.Errorf("run: write snippet: %w", err)
	}
	_, err = f.WriteString(code)
	if err == nil && owner != nil {
		err = f.Chown(owner[0], owner[1])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("run: write snippet: %w", err)
	}
	return f.Name(), nil
}

// start runs the prepared child to completion and builds the Result. job is
// set for an isolated run, whose init gets it.
func start(ctx context.Context, opts Options, timeout time.Duration, python string, args, env []string, job *Job) (Result, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return Result{}, fmt.Errorf("run: %w", err)
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("run: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return Result{}, fmt.Errorf("run: %w", err)
	}
	// Pipes rather than io.Writers: os/exec would wait for the copying to
	// end, which a background process holding the pipe can postpone; this
	// way Wait returns when the child exits, and the sweep then closes the
	// pipes by killing whatever holds them.
	cmd := &osexec.Cmd{
		Path:   python,
		Args:   append([]string{"python3"}, args...),
		Dir:    opts.Dir,
		Env:    env,
		Stdin:  devnull,
		Stdout: outW,
		Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Cloneflags: opts.Cloneflags,
			Credential: opts.Credential,
			// If the runner dies (the local backend's serve process
			// crashing), the child dies with it, and with CLONE_NEWPID its
			// whole namespace. The signal follows the forking thread, and
			// Go keeps its threads for the life of the process.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	var sb *sandboxStart
	if opts.Sandbox != nil {
		sb, err = prepareSandbox(cmd, opts, python, args, env, job)
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return Result{}, err
		}
		// Runs after the sweep below: the cgroups are empty by then.
		defer sb.close()
	}
	cgDir, cgV2 := memCgroup()
	oomBefore := oomKills(cgDir, cgV2)

	live.Lock()
	err = cmd.Start()
	if err == nil {
		live.pids[cmd.Process.Pid] = true
	}
	live.Unlock()
	outW.Close()
	errW.Close()
	if sb != nil {
		sb.started()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		return Result{}, fmt.Errorf("run: start %s: %w", cmd.Path, err)
	}
	pid := cmd.Process.Pid

	max := opts.maxOutput()
	stdout, stderr := newBoundedBuffer(max), newBoundedBuffer(max)
	var readers sync.WaitGroup
	readers.Go(func() { drain(outR, stdout) })
	readers.Go(func() { drain(errR, stderr) })

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }() // owned here: every path below receives from waited

	// An isolated run's timeout starts when its code can: the init's set-up
	// (mounts, files, cgroups) is bounded on its own.
	var setupErr error
	if sb != nil {
		setupErr = sb.handshake(ctx, pid)
	}
	began := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, cancelled bool
	var killErr error
	if setupErr == nil {
		select {
		case err = <-waited:
		case <-timer.C:
			timedOut = true
		case <-ctx.Done():
			cancelled = true
		}
	}
	switch {
	case setupErr != nil:
		killErr = killRun(pid)
		err = <-waited
	case (timedOut || cancelled) && opts.UnsafeKillLeaderOnly:
		killErr = cmd.Process.Kill()
		err = <-waited
	case timedOut || cancelled:
		if sb != nil {
			sb.cg.hurry()
		}
		killErr = killRun(pid)
		err = <-waited
	}
	duration := time.Since(began)

	live.Lock()
	delete(live.pids, pid)
	live.Unlock()
	if !opts.UnsafeKillLeaderOnly {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sweepTimeout)
		if e := sweep(sctx, 0); e != nil && killErr == nil {
			killErr = e
		}
		cancel()
		// Everything that held the pipes is dead now; the deadline only
		// guards against a writer the sweep could not reach.
		deadline := time.Now().Add(drainTimeout)
		outR.SetReadDeadline(deadline)
		errR.SetReadDeadline(deadline)
	}
	readers.Wait()
	outR.Close()
	errR.Close()
	if setupErr != nil {
		return Result{}, setupErr
	}

	res := Result{
		Stdout:          stdout.String("stdout"),
		Stderr:          stderr.String("stderr"),
		DurationMS:      duration.Milliseconds(),
		StdoutTruncated: stdout.truncated(),
		StderrTruncated: stderr.truncated(),
	}
	var ws syscall.WaitStatus
	if cmd.ProcessState != nil {
		ws, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
	} else if err != nil {
		return res, fmt.Errorf("run: wait: %w", err)
	}
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
	}
	switch {
	case timedOut:
		res.ExitCode = -1
		res.TimedOut = true
		res.Stderr = appendLine(res.Stderr, "timed out after "+formatSeconds(timeout)+"\n")
	case cancelled:
	case sb != nil:
		// Only the kernel's own count: an exit code of 137 or a SIGKILL
		// the run sent itself is no evidence.
		if sb.cg.oomKills() > 0 {
			res.OOMKilled = true
			res.Stderr = appendLine(res.Stderr, oomLine(sb.cg.memoryLimit))
		}
	case opts.MemoryLimit > 0 && opts.Cloneflags&syscall.CLONE_NEWPID != 0 && ws.Exited() && ws.ExitStatus() == 137:
		// The preamble's out-of-memory exit as a PID namespace's init,
		// which cannot SIGKILL itself (see limits.go).
		res.OOMKilled = true
		res.Stderr = appendLine(res.Stderr, oomLine(opts.MemoryLimit))
	case !ws.Signaled() || ws.Signal() != syscall.SIGKILL:
		// Only a SIGKILL we did not send can be an out-of-memory death.
	case oomBefore >= 0 && oomKills(cgDir, cgV2) > oomBefore:
		res.OOMKilled = true
		res.Stderr = appendLine(res.Stderr, oomLine(cgroupMemoryLimit(cgDir, cgV2)))
	case opts.MemoryLimit > 0:
		res.OOMKilled = true
		res.Stderr = appendLine(res.Stderr, oomLine(opts.MemoryLimit))
	}
	if cancelled {
		return res, fmt.Errorf("run cancelled: %w", context.Cause(ctx))
	}
	if killErr != nil {
		return res, fmt.Errorf("run: %w", killErr)
	}
	return res, nil
}

// isHostFault reports whether writing input files failed for a reason of the
// host's rather than the job's.
func isHostFault(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EIO, syscall.EROFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// killRun kills the child's process group at once, then everything else it
// started.
func killRun(pid int) error {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	return sweep(ctx, pid)
}

// appendLine appends line to s, starting it on a line of its own.
func appendLine(s, line string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + line
}

// formatSeconds writes d in seconds: "2", or "0.5" for a fraction.
func formatSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// findPython resolves the interpreter in the child's PATH, not the
// runner's: the runner's PATH may hold shims (pyenv) that need variables the
// child does not get.
func findPython(python string, env []string) (string, error) {
	if python == "" {
		python = "python3"
	}
	if strings.Contains(python, "/") {
		return python, nil
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for dir := range strings.SplitSeq(path, ":") {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, python)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("run: %s not found in PATH %s", python, path)
}
