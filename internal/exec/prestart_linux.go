package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// Pre-started runs.
//
// Starting python3 (the interpreter's own start-up and site's imports) is
// most of what a short run costs. Prestart pays it before the job is known:
// python3 starts with the preamble (limits.go), which applies every limit
// and then waits on a socket, inherited as ctlFD, for the job. Over that
// socket:
//
//   - the preamble writes stubReady once the limits hold;
//   - with Options.Preload it then imports those modules, asking before
//     each (stubAsks) and reading the answer: goAhead, which the Interp
//     writes once Options.PreloadGate lets it, or the job, which ends the
//     preload there. Having imported them all, it writes stubPreloaded, the
//     modules that failed (comma-separated) and a newline;
//   - it blocks reading the socket;
//   - Run writes the code file's path, a NUL and the code, and shuts its
//     side for writing, once the input files and the code file are in place.
//     A goAhead comes only in answer to a stubAsks and never after the job
//     has begun (both are written under mu): a goAhead in the read that
//     brings the job's start is its first byte, and the path, absolute,
//     begins with '/';
//   - the preamble reads to end of file, writes stubTook and closes the
//     socket, and only then compiles and runs the code.
//
// So the working directory holds the job's files before the snippet's first
// line, the code comes from the runner rather than from a path anything else
// could write between the start and the job, and no descriptor of the
// exchange is left to the snippet. stubTook tells the two endings apart that
// an exit code cannot: an interpreter that ended before it wrote it never ran
// a line of the job (ErrNotTaken), one that wrote it ran the job.
//
// An isolated run's python3 is its init's child and gets the socket from
// it (sandbox.go). The interpreter waits in a blocking read, which costs no
// CPU, in its own process group (isolated, its init's), with its stdout and stderr already on the pipes Run drains;
// it is registered as a live run from its start, so that no other run's
// sweep mistakes it for an orphan.

// ctlFD is the socket's descriptor in the child: the first after stdio.
const ctlFD = 3

// What the preamble writes on the socket.
const (
	stubReady     = 'r'
	stubAsks      = 'w' // may it import the next module of the preload
	stubPreloaded = 'p'
	stubTook      = 't'
)

// goAhead is what the Interp answers stubAsks with: import the next one.
const goAhead = 'g'

// maxPreloadReport bounds what monitor keeps of the preload's report: the
// names of the modules that failed, far fewer bytes than this.
const maxPreloadReport = 4096

// ErrNotTaken marks a run whose interpreter ended (or was killed) before it
// took the job: none of the job ran. A runner may answer it as "not ready".
var ErrNotTaken = errors.New("python3 ended before it took the job")

// Interp is a python3 started before its job, its limits applied, waiting
// for one job. Make it with Prestart; call Run at most once and Close always.
type Interp struct {
	opts Options // resolved: Dir is absolute
	su   setup
	c    *child
	ctl  *os.File // our end of the socket

	ready, preloaded, took, lost chan struct{} // closed as the socket says so
	monitored                    chan struct{} // closed when the socket has ended
	asks                         chan struct{} // a stubAsks waits for its answer
	missing                      []string      // set before preloaded is closed

	mu       sync.Mutex
	used     bool  // Run was called: Run owns the child's end
	closed   bool  // Close ran
	closeErr error // why it ended by itself, if it did
}

// Prestart starts python3 for one job under opts and returns once it has
// been started; Ready is closed when it waits with its limits applied.
// opts.Dir must exist, unless the run is isolated (opts.Sandbox): Prestart
// then returns once the sandbox is set up and python3 forked in it (see
// sandbox.go).
func Prestart(opts Options) (*Interp, error) {
	for _, n := range opts.Preload {
		if !moduleName.MatchString(n) {
			return nil, fmt.Errorf("prestart: preload %q: not a module name", n)
		}
	}
	var su setup
	var err error
	if s := opts.Sandbox; s != nil {
		if err := checkSandbox(s); err != nil {
			return nil, err
		}
		opts.Dir = SandboxDir
		if su.env = opts.Env; su.env == nil {
			su.env = DefaultEnv(SandboxDir)
		}
		if su.python, err = findPython(opts.Python, su.env); err != nil {
			return nil, err
		}
	} else {
		if su, err = resolve(&opts); err != nil {
			return nil, err
		}
		if owner := su.owner; owner != nil {
			// The child enters Dir after it has become the owner.
			if err := os.Lchown(opts.Dir, owner[0], owner[1]); err != nil {
				return nil, fmt.Errorf("prestart: %w", err)
			}
		}
	}
	if err := becomeSubreaper(); err != nil {
		return nil, fmt.Errorf("prestart: %w", err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("prestart: %w", err)
	}
	// Non-blocking, so that Close can end a read or write in flight.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("prestart: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "sandbox-ctl"), os.NewFile(uintptr(fds[1]), "sandbox-ctl")
	c, err := spawn(opts, su.python, pythonArgs(opts, "", ctlFD), su.env, theirs)
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, err
	}
	p := &Interp{opts: opts, su: su, c: c, ctl: ours,
		ready: make(chan struct{}), preloaded: make(chan struct{}), took: make(chan struct{}), lost: make(chan struct{}),
		monitored: make(chan struct{}), asks: make(chan struct{}, 1)}
	go p.monitor() // owned: Run and Close wait for monitored
	if len(opts.Preload) > 0 {
		go p.answer() // owned: it ends with the monitor
	}
	if c.sb != nil {
		if err := c.sb.setup(context.Background(), c.pid); err != nil {
			p.mu.Lock()
			p.closed = true
			p.kill()
			p.mu.Unlock()
			return nil, fmt.Errorf("prestart: %w", err)
		}
	}
	return p, nil
}

// monitor reads what the preamble writes until the socket ends: at the
// latest when the child is gone.
func (p *Interp) monitor() {
	defer close(p.monitored)
	var (
		b      [64]byte
		report []byte // the preload's report once stubPreloaded is read
	)
	for {
		n, err := p.ctl.Read(b[:])
		for _, x := range b[:n] {
			switch {
			case report != nil && x == '\n':
				p.missing = strings.FieldsFunc(string(report[1:]), func(r rune) bool { return r == ',' })
				report = nil
				close(p.preloaded)
			case report != nil:
				if len(report) < maxPreloadReport {
					report = append(report, x)
				}
			case x == stubPreloaded && !isClosed(p.preloaded):
				report = []byte{x}
			case x == stubReady && !isClosed(p.ready):
				close(p.ready)
			case x == stubAsks:
				select {
				case p.asks <- struct{}{}:
				default: // one asked already: the preamble asks again only once answered
				}
			case x == stubTook && !isClosed(p.took):
				close(p.took)
			}
		}
		if err != nil {
			if !isClosed(p.took) {
				close(p.lost)
			}
			return
		}
	}
}

// answer lets the preload go on, one module or step at a time, each
// time Options.PreloadGate lets it and the job has not come.
func (p *Interp) answer() {
	for {
		select {
		case <-p.asks:
		case <-p.monitored:
			return
		}
		if g := p.opts.PreloadGate; g != nil && !g(p.monitored) {
			return
		}
		p.mu.Lock()
		if !p.used && !p.closed {
			// One byte into an empty socket buffer: it does not block.
			_, _ = p.ctl.Write([]byte{goAhead})
		}
		p.mu.Unlock()
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Ready is closed once the interpreter waits for its job with its limits
// applied.
func (p *Interp) Ready() <-chan struct{} { return p.ready }

// Preloaded is closed once the interpreter has imported, or failed to
// import, every module of Options.Preload; never when the list is empty or
// its job came first.
func (p *Interp) Preloaded() <-chan struct{} { return p.preloaded }

// Missing lists the modules of Options.Preload that failed to import: nil
// until Preloaded is closed.
func (p *Interp) Missing() []string {
	if !isClosed(p.preloaded) {
		return nil
	}
	return p.missing
}

// Lost is closed when the interpreter ended before it took a job; Close
// then says how.
func (p *Interp) Lost() <-chan struct{} { return p.lost }

// Pid is the interpreter's process id.
func (p *Interp) Pid() int { return p.c.pid }

// Run hands job to the interpreter: it writes the job's files into the
// working directory and the code to a file of its own (an isolated run's
// init writes both, see sandbox.go), sends the code, and
// from then on is Run's usual run of a child to its end, timeout, tree kill,
// bounded output and all. The timeout starts when the code is sent. Run
// answers an interpreter that ended before it took the job with an error
// wrapping ErrNotTaken; one that did not take it by the deadline timed out.
func (p *Interp) Run(ctx context.Context, job Job) (wire.Result, error) {
	p.mu.Lock()
	switch {
	case p.used:
		p.mu.Unlock()
		return wire.Result{}, errors.New("run: this interpreter has had its job")
	case p.closed:
		err := p.closeErr
		p.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("run: %w: it was closed", ErrNotTaken)
		}
		return wire.Result{}, err
	}
	p.used = true
	p.mu.Unlock()
	res, err := p.run(ctx, job)
	if p.su.snippet != "" {
		os.Remove(p.su.snippet)
	}
	if p.c.sb != nil {
		// After the sweep and the outputs: the cgroups are empty by then.
		p.c.sb.close()
	}
	p.ctl.Close()
	return res, err
}

func (p *Interp) run(ctx context.Context, job Job) (wire.Result, error) {
	select {
	case <-p.lost:
		p.kill()
		return wire.Result{}, p.closeErr
	default:
	}
	if err := checkJob(job); err != nil {
		p.kill()
		return wire.Result{}, err
	}
	snippet, err := p.place(ctx, job)
	if err != nil {
		p.kill()
		return wire.Result{}, err
	}
	timeout := jobTimeout(job)
	msg := make([]byte, 0, len(snippet)+1+len(job.Code))
	msg = append(append(append(msg, snippet...), 0), job.Code...)
	// Count only what this job's run may cause: the cgroup is the pod's.
	p.c.oomBefore = oomKills(p.c.cgDir, p.c.cgV2)
	fed := make(chan struct{})
	go func() { // owned: received below
		defer close(fed)
		if _, err := p.ctl.Write(msg); err == nil {
			closeWrite(p.ctl)
		}
	}()
	// The job's output streams from when the preamble took it: before,
	// whatever python3 wrote is not the job's (and a run that never took
	// it is answered ErrNotTaken, not with output).
	ran := make(chan struct{})
	var attached sync.WaitGroup
	if job.Output != nil {
		attached.Go(func() {
			select {
			case <-p.took:
				p.c.attach(job.Output)
			case <-ran:
			}
		})
	}
	end := p.c.waitAndKill(ctx, timeout, p.opts)
	close(ran)
	attached.Wait()
	res := p.c.collect(end)
	// The child is gone: a message it did not read is dropped, and the
	// socket ends once the monitor has read what the preamble wrote.
	p.ctl.SetWriteDeadline(time.Now())
	if !end.reaped {
		// Killed and still exiting (a PID namespace's init answers without
		// waiting for that, see deathGrace): one that had not taken the job
		// holds its end of the socket until its exit, which must not hold
		// the answer either. What it wrote before is read at once.
		p.ctl.SetReadDeadline(time.Now().Add(dyingDrain))
	}
	<-fed
	<-p.monitored
	if !isClosed(p.took) && !end.timedOut && !end.cancelled {
		return wire.Result{}, fmt.Errorf("run: %w: %s", ErrNotTaken, describeExit(p.c, res.Stderr))
	}
	return p.c.judge(ctx, res, end, p.opts, timeout, &job)
}

// place puts the job's files and code where python3 will find them and
// returns the code file's path. An isolated run's init writes them in the
// sandbox; anything else is written here, into Dir and TMPDIR.
func (p *Interp) place(ctx context.Context, job Job) (string, error) {
	if sb := p.c.sb; sb != nil {
		if err := sb.sendJob(ctx, job); err != nil {
			if errors.Is(err, ErrInvalidJob) || ctx.Err() != nil {
				return "", err
			}
			// Nothing of the job ran: python3 never had its code.
			return "", fmt.Errorf("%w: %w", ErrNotTaken, err)
		}
		sb.cg.wake()
		return sandboxSnippet, nil
	}
	if err := writeFiles(p.opts.Dir, job.Files, p.su.owner); err != nil {
		if isHostFault(err) {
			return "", fmt.Errorf("run: %w", err)
		}
		// A path through a symlink out of Dir, a file where a directory
		// must go: the job's fault.
		return "", fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	var err error
	if p.su.snippet, err = writeSnippet(job.Code, p.su.owner); err != nil {
		return "", err
	}
	return p.su.snippet, nil
}

// closeWrite ends our side of the socket for writing: the preamble reads to
// end of file.
func closeWrite(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_WR) })
}

// Close kills the interpreter if it has not been given a job and releases
// what it holds. It returns an error wrapping ErrNotTaken, saying how, when
// the interpreter had ended by itself before a job. Called while Run runs,
// it leaves the interpreter to Run.
func (p *Interp) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.used:
		// Run's own: Run reports how it ended.
		p.closed = true
		return nil
	case p.closed:
		return p.closeErr
	}
	p.closed = true
	p.kill()
	return p.closeErr
}

// kill ends an interpreter that will not run a job and records, in
// closeErr, how it had ended if it ended by itself.
func (p *Interp) kill() {
	died := isClosed(p.lost)
	select {
	case <-p.c.waited:
		died = true
	default:
		// It started nothing: its group is the whole of it.
		_ = syscall.Kill(-p.c.pid, syscall.SIGKILL)
		<-p.c.waited
	}
	live.Lock()
	delete(live.pids, p.c.pid)
	live.Unlock()
	deadline := time.Now().Add(drainTimeout)
	p.c.outR.SetReadDeadline(deadline)
	p.c.errR.SetReadDeadline(deadline)
	res := p.c.collect(ending{})
	if p.c.sb != nil {
		p.c.sb.close()
	}
	p.ctl.Close()
	<-p.monitored
	if died {
		p.closeErr = fmt.Errorf("prestart: %w: %s", ErrNotTaken, describeExit(p.c, res.Stderr))
	}
}

// describeExit says how a child that did not run its job ended: its status
// and the start of what it wrote to stderr (python3's own complaint).
func describeExit(c *child, stderr string) string {
	how := "still running"
	if st := c.cmd.ProcessState; st != nil {
		how = st.String()
	}
	const keep = 512
	if stderr = strings.TrimSpace(stderr); len(stderr) > keep {
		stderr = stderr[:keep] + "…"
	}
	if stderr != "" {
		how += ", stderr: " + stderr
	}
	return how
}
