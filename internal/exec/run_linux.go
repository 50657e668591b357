package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/wire"
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
// returns an error, with a wire.Result as complete as it could make, only when it
// could not run the job (an invalid job wraps ErrInvalidJob) or ctx ended
// first; the snippet failing is a wire.Result with a non-zero ExitCode.
//
// When Run returns, every process the snippet started is dead, whether it
// timed out or exited; in a PID namespace's init, killed and perhaps still
// exiting (see deathGrace), never able to run its code again.
// wire.Result.SandboxID is left for the caller.
func Run(ctx context.Context, job Job, opts Options) (wire.Result, error) {
	if opts.Sandbox != nil {
		return runSandboxed(ctx, job, opts)
	}
	if err := checkJob(job); err != nil {
		return wire.Result{}, err
	}
	// A run started for its job is a pre-started one that is handed the job
	// at once: one way in for the code, so that what a snippet sees cannot
	// depend on how long its interpreter waited. The files are written while
	// python3 starts. A preload would only delay the job it has already.
	opts.Preload = nil
	p, err := Prestart(opts)
	if err != nil {
		return wire.Result{}, err
	}
	defer p.Close()
	return p.Run(ctx, job)
}

// checkJob validates a job's files and output patterns before anything is
// written or started.
func checkJob(job Job) error {
	if err := checkFiles(job.Files); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if err := CheckOutputs(job.Outputs); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return nil
}

// runSandboxed is Run for an isolated run: the same pre-started run handed
// its job at once, in which the init writes the code and the files inside
// the sandbox, so nothing is written on the host.
func runSandboxed(ctx context.Context, job Job, opts Options) (wire.Result, error) {
	if err := checkJob(job); err != nil {
		return wire.Result{}, err
	}
	opts.Preload = nil
	p, err := Prestart(opts)
	if err != nil {
		return wire.Result{}, err
	}
	defer p.Close()
	return p.Run(ctx, job)
}

// setup is what every unisolated run prepares before the child starts.
type setup struct {
	timeout time.Duration
	env     []string
	python  string
	owner   *[2]int // the child's uid and gid, when it runs as another user
	snippet string  // the code's file: the caller removes it after the run
}

// prepare resolves opts.Dir, the timeout, the environment and the
// interpreter, and writes the code to a file of its own.
func prepare(job Job, opts *Options) (setup, error) {
	su, err := resolve(opts)
	if err != nil {
		return setup{}, err
	}
	su.timeout = jobTimeout(job)
	// The snippet lives outside the working directory, so that the
	// snippet's own files are exactly Job.Files. A new file in TMPDIR, not a
	// directory of its own: on ext4 a directory costs half a millisecond.
	if su.snippet, err = writeSnippet(job.Code, su.owner); err != nil {
		return setup{}, err
	}
	return su, nil
}

// resolve makes opts.Dir absolute and finds the environment, the
// interpreter and the child's owner: what a run needs before its job.
func resolve(opts *Options) (setup, error) {
	if opts.Dir == "" {
		return setup{}, errors.New("run: no working directory")
	}
	// HOME and the child's cwd must not depend on ours.
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return setup{}, fmt.Errorf("run: %w", err)
	}
	opts.Dir = dir
	su := setup{env: opts.Env}
	if su.env == nil {
		su.env = DefaultEnv(opts.Dir)
	}
	if su.python, err = findPython(opts.Python, su.env); err != nil {
		return setup{}, err
	}
	if c := opts.Credential; c != nil {
		su.owner = &[2]int{int(c.Uid), int(c.Gid)}
	}
	return su, nil
}

// jobTimeout is job's timeout, or DefaultTimeout.
func jobTimeout(job Job) time.Duration {
	if job.Timeout <= 0 {
		return DefaultTimeout
	}
	return job.Timeout
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
	// Absolute, which a pre-started interpreter's protocol relies on
	// (prestart.go), whatever TMPDIR says.
	abs, err := filepath.Abs(f.Name())
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("run: write snippet: %w", err)
	}
	return abs, nil
}

// start runs the prepared child, unisolated, to completion and builds the
// wire.Result. job is set for a snippet; nil for a tool call.
func start(ctx context.Context, opts Options, timeout time.Duration, python string, args, env []string, job *Job) (wire.Result, error) {
	c, err := spawn(opts, python, args, env, nil)
	if err != nil {
		return wire.Result{}, err
	}
	return c.finish(ctx, timeout, opts, job)
}

// finish is a started child's life after its spawn, in four steps: wait for
// it and kill what is left, collect its output, classify how it ended, and
// take what it left behind (its usage, its output files).
func (c *child) finish(ctx context.Context, timeout time.Duration, opts Options, job *Job) (wire.Result, error) {
	end := c.waitAndKill(ctx, timeout, opts)
	res := c.collect(end)
	return c.judge(ctx, res, end, opts, timeout, job)
}

// judge classifies a collected run, adds what it left behind, and turns how
// it ended into Run's error.
func (c *child) judge(ctx context.Context, res wire.Result, end ending, opts Options, timeout time.Duration, job *Job) (wire.Result, error) {
	if err := classify(&res, c, end, opts, timeout); err != nil {
		return res, err
	}
	res.Usage = c.base.measure(c.state(end))
	if job != nil && len(job.Outputs) > 0 && !end.cancelled {
		res.Files, res.FilesIncomplete = c.outputs(opts, job.Outputs)
	}
	if end.cancelled {
		return res, fmt.Errorf("run cancelled: %w", context.Cause(ctx))
	}
	if end.killErr != nil {
		return res, fmt.Errorf("run: %w", end.killErr)
	}
	return res, nil
}

// child is a started run: its process, its output being drained, and what
// classify needs to judge its end.
type child struct {
	cmd            *osexec.Cmd
	pid            int
	sb             *sandboxStart
	outR, errR     *os.File
	stdout, stderr *boundedBuffer
	readers        sync.WaitGroup
	waited         chan error
	cgDir          string
	cgV2           bool
	oomBefore      int64
	base           usageBase
}

// attach makes out get the run's output from now on (see Job.Output).
func (c *child) attach(out func(stream, text string)) {
	c.stdout.attach(func(text string) { out(wire.EventStdout, text) })
	c.stderr.attach(func(text string) { out(wire.EventStderr, text) })
}

// spawn starts the child with its output on pipes being drained, and
// registers it as a live run. ctl, when set, is the child's ctlFD (an
// isolated run's init passes it on to python3).
func spawn(opts Options, python string, args, env []string, ctl *os.File) (*child, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("run: %w", err)
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
	if ctl != nil {
		cmd.ExtraFiles = []*os.File{ctl} // ctlFD
	}
	c := &child{cmd: cmd, outR: outR, errR: errR}
	if opts.Sandbox != nil {
		c.sb, err = prepareSandbox(cmd, opts, python, args, env)
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
	}
	c.cgDir, c.cgV2 = memCgroup()
	c.oomBefore = oomKills(c.cgDir, c.cgV2)

	c.base = usageBaseline()
	live.Lock()
	err = cmd.Start()
	if err == nil {
		live.pids[cmd.Process.Pid] = true
	}
	live.Unlock()
	outW.Close()
	errW.Close()
	if c.sb != nil {
		c.sb.started()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if c.sb != nil {
			c.sb.close()
		}
		return nil, fmt.Errorf("run: start %s: %w", cmd.Path, err)
	}
	c.pid = cmd.Process.Pid

	max := opts.maxOutput()
	c.stdout, c.stderr = newBoundedBuffer(max), newBoundedBuffer(max)
	c.readers.Go(func() { drain(outR, c.stdout) })
	c.readers.Go(func() { drain(errR, c.stderr) })

	c.waited = make(chan error, 1)
	go func() { c.waited <- cmd.Wait() }() // owned by waitAndKill, which receives on every path
	return c, nil
}

// ending is how a run ended, as waitAndKill saw it.
type ending struct {
	waitErr             error // from cmd.Wait
	reaped              bool  // cmd.Wait returned: cmd.ProcessState may be read
	timedOut, cancelled bool
	killErr             error
	duration            time.Duration
}

// dyingDrain is how long the pipes are still read after a sweep that left
// killed processes exiting (see deathGrace). They can write nothing more,
// and what they wrote before is in the pipes, to be read at once; the pipes
// themselves close only when the last of them has exited.
const dyingDrain = 100 * time.Millisecond

// waitAndKill waits for the child's exit, its deadline or ctx; kills the
// whole run at the deadline; and, whatever happened, sweeps every process
// the run left, so that the pipes close.
func (c *child) waitAndKill(ctx context.Context, timeout time.Duration, opts Options) ending {
	var end ending
	began := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case end.waitErr = <-c.waited:
		end.reaped = true
	case <-timer.C:
		end.timedOut = true
	case <-ctx.Done():
		end.cancelled = true
	}
	// A PID namespace's init (a pod's runner) waits for the killed run's
	// exit no longer than deathGrace; anywhere else until the sweep is done.
	settleBy := time.Now().Add(deathGrace)
	switch {
	case (end.timedOut || end.cancelled) && opts.WeakenKillLeaderOnly:
		end.killErr = c.cmd.Process.Kill()
		end.waitErr, end.reaped = <-c.waited, true
	case end.timedOut || end.cancelled:
		if c.sb != nil {
			c.sb.cg.hurry()
		}
		end.killErr = killRun(c.pid)
		end.waitErr, end.reaped = c.awaitLeader(settleBy)
	}
	end.duration = time.Since(began)

	live.Lock()
	delete(live.pids, c.pid)
	live.Unlock()
	if !opts.WeakenKillLeaderOnly {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sweepTimeout)
		if os.Getpid() == 1 {
			sctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), settleBy)
		}
		settled, e := sweep(sctx, 0)
		if e != nil && end.killErr == nil {
			end.killErr = e
		}
		cancel()
		// Everything that held the pipes is dead now (or killed and still
		// exiting, when not settled); the deadline only guards against a
		// writer the sweep could not reach.
		deadline := time.Now().Add(drainTimeout)
		if !settled {
			deadline = time.Now().Add(dyingDrain)
		}
		c.outR.SetReadDeadline(deadline)
		c.errR.SetReadDeadline(deadline)
	}
	return end
}

// awaitLeader waits for os/exec to reap the killed child: in a PID
// namespace's init until by at most (see deathGrace), elsewhere for as
// long as it takes. reaped is false when by came first.
func (c *child) awaitLeader(by time.Time) (waitErr error, reaped bool) {
	if os.Getpid() != 1 {
		return <-c.waited, true
	}
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case err := <-c.waited:
		return err, true
	case <-t.C:
		return nil, false
	}
}

// collect waits for the output to be drained and returns it as a wire.Result.
func (c *child) collect(end ending) wire.Result {
	c.readers.Wait()
	c.outR.Close()
	c.errR.Close()
	return wire.Result{Process: wire.Process{
		Stdout:          c.stdout.String("stdout"),
		Stderr:          c.stderr.String("stderr"),
		DurationMS:      end.duration.Milliseconds(),
		StdoutTruncated: c.stdout.truncated(),
		StderrTruncated: c.stderr.truncated(),
	}}
}

// classify fills in how the run ended: its exit code, a timeout, or an
// out-of-memory death, from the kernel's own evidence where there is some.
func classify(res *wire.Result, c *child, end ending, opts Options, timeout time.Duration) error {
	var ws syscall.WaitStatus
	if ps := c.state(end); ps != nil {
		ws, _ = ps.Sys().(syscall.WaitStatus)
	} else if end.waitErr != nil {
		return fmt.Errorf("run: wait: %w", end.waitErr)
	}
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
	}
	switch {
	case end.timedOut:
		res.ExitCode = -1
		res.TimedOut = true
		res.Stderr = appendLine(res.Stderr, TimedOutLine(timeout))
	case end.cancelled:
	case c.sb != nil:
		// Only the kernel's own count: an exit code of 137 or a SIGKILL
		// the run sent itself is no evidence.
		if c.sb.cg.oomKills() > 0 {
			res.OOMKilled = true
			res.Stderr = appendLine(res.Stderr, oomLine(c.sb.cg.memoryLimit))
		}
	case opts.MemoryLimit > 0 && opts.Cloneflags&syscall.CLONE_NEWPID != 0 && ws.Exited() && ws.ExitStatus() == 137:
		// The preamble's out-of-memory exit as a PID namespace's init,
		// which cannot SIGKILL itself (see limits.go).
		res.OOMKilled = true
		res.Stderr = appendLine(res.Stderr, oomLine(opts.MemoryLimit))
	case !ws.Signaled() || ws.Signal() != syscall.SIGKILL:
		// Only a SIGKILL we did not send can be an out-of-memory death.
	case c.oomBefore >= 0 && oomKills(c.cgDir, c.cgV2) > c.oomBefore:
		res.OOMKilled = true
		res.Stderr = appendLine(res.Stderr, oomLine(cgroupMemoryLimit(c.cgDir, c.cgV2)))
	case opts.MemoryLimit > 0:
		res.OOMKilled = true
		res.Stderr = appendLine(res.Stderr, oomLine(opts.MemoryLimit))
	}
	return nil
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
// started. A PID namespace's init kills the whole namespace in one call and
// leaves the reaping to the sweep that follows os/exec's.
func killRun(pid int) error {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if os.Getpid() == 1 {
		killAll()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	_, err := sweep(ctx, pid)
	return err
}

// state is the child's process state once os/exec has reaped it, else nil.
func (c *child) state(end ending) *os.ProcessState {
	if !end.reaped {
		return nil
	}
	return c.cmd.ProcessState
}

// appendLine appends line to s, starting it on a line of its own.
func appendLine(s, line string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + line
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
