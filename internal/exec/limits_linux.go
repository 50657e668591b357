package exec

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
)

// Limits on the child, and how they are applied.
//
// os/exec cannot set rlimits between fork and exec, so Run starts python3
// with a short preamble (-c) that lowers the soft and hard limits of its own
// process and only then reads, compiles and executes the snippet. There is no
// window: no byte of the snippet runs before the limits hold, and an
// unprivileged process cannot raise a hard limit again. Everything that runs
// before the preamble is the interpreter's own start-up, and -I (isolated
// mode) keeps that free of anything the snippet controls: no PYTHON*
// variables, no user site directory under HOME (which is the working
// directory), and no working directory on sys.path until the preamble puts
// it there. The alternatives cost more: re-executing this binary as a shim
// that calls setrlimit and then execve(python3) pays a second Go start-up
// (several milliseconds once client-go is linked in), and prlimit(2) on the
// started child races with its first fork.
//
// The preamble also makes the snippet the first choice of the kernel's OOM
// killer (oom_score_adj 1000, which any process may raise for itself), so
// that whatever shares a memory cgroup with it, the runner in a pod above
// all, keeps the memory to kill it and answer; and it lowers the snippet's
// CPU priority by Options.Nice, likewise, and with Options.IdleCPU puts it
// in SCHED_IDLE: a fork bomb of hundreds of nice-19 processes still
// outweighs one nice-0 runner (15 each against 1,024), at weight 3 each it
// weighs a quarter as much, and the runner's wakeups preempt it at once.
//
// The preamble costs about 1 ms (BenchmarkPreamble): 0.2 ms to import
// resource, 0.8 ms because compile() initialises the interpreter's AST types.
// exec() of the source string would skip the latter, but the code would then
// be "<string>": no source lines in tracebacks, logging.exception or
// inspect.getsource. A real file keeps all of them. Waiting for its code on
// the socket (below), the preamble compiles nothing first, so that the AST
// types are ready before the code comes.
//
// The preamble also hides itself, so that the snippet sees what
// `python3 -I -u -B snippet.py` would show it: the snippet runs in
// __main__'s own namespace with __file__, __cached__ and a SourceFileLoader
// as __loader__; sys.argv and sys.orig_argv name the snippet file, which is
// in sys.path_importer_cache as python3's file runner leaves it; the
// resource module is gone from sys.modules again; a traceback starts at the
// snippet's frame and sets sys.last_*; and __file__ and __cached__ go when
// the code ends without SystemExit, as with the file runner. What still
// differs (sys.path[0], the exit of an uncaught KeyboardInterrupt, the
// preamble's two frames below the snippet's, the command line in /proc) is
// listed in docs/runner.md and pinned by TestFreshIsBare.
//
// When the snippet dies of MemoryError (the RLIMIT_AS cap), the preamble drops
// the snippet's globals (so that printing has memory to work with), prints
// the traceback as best it can and then SIGKILLs its own process, whatever
// the printing did (os is imported up front: an import may itself fail for
// want of memory). As the init of a PID namespace (the local backend) it
// cannot SIGKILL itself, so it exits with 137 instead. So an out-of-memory
// death looks the same whether the cap or the cgroup's OOM killer caused it,
// and Run reports a SIGKILL it did not send under a memory cap as out of
// memory.
//
// Waiting on the socket, the preamble may first import Options.Preload, so
// that a job's own imports of them cost nothing: after it has said it is
// ready, so that the preload never delays readiness, and with stdout and
// stderr on /dev/null, so that nothing it prints reaches the job's output.
// Before each module it asks on the socket whether it may go on and reads
// the answer: a go (Options.PreloadGate) or the job, which ends the preload
// there and then waits at most for the module under way. After the
// modules come the warm-up steps (preload.go), code rather than names
// (they begin with '#'), asked for alike. The modules
// come before the working directory is on sys.path and before the job's
// files exist, so neither can stand in for one.
//
// With a preload the interpreter would also spend, at its exit, the time
// to tear down every module it holds: about as long as a print(1) job
// takes whole (hundreds of milliseconds under load for the data stack, 2026-12-06), which
// a snippet cannot observe. So the preamble registers, before the preload,
// an atexit handler, which runs after every other (they run last in,
// first out) and after the wait for non-daemon threads: it flushes the
// standard streams and ends the process with the exit code python3 would
// have had, which the preamble noted as the snippet ended.
//
// The code reaches the preamble in one of two ways. Given a file (a tool
// call), it reads that file. Given a socket (ctlFD, every snippet's run,
// isolated or not), it says on it when the limits hold, reads the code
// file's path and the code from it, acknowledges, and closes it before a
// line of the snippet runs; see prestart.go.

// Resource numbers; syscall lacks RLIMIT_NPROC (<asm-generic/resource.h>).
const (
	rlimitFsize  = syscall.RLIMIT_FSIZE
	rlimitCore   = syscall.RLIMIT_CORE
	rlimitNproc  = 6
	rlimitNofile = syscall.RLIMIT_NOFILE
	rlimitAS     = syscall.RLIMIT_AS
)

const preamble = `def _sandbox():
    import os, sys, resource as r
    for k, v in %s:
        h = r.getrlimit(k)[1]
        if h != r.RLIM_INFINITY and (v == r.RLIM_INFINITY or v > h):
            v = h
        r.setrlimit(k, (v, v))
    del r, sys.modules['resource']
    try:
        with open('/proc/self/oom_score_adj', 'w') as f:
            f.write('1000')
    except OSError:
        pass
    os.nice(%d)
    if %s:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    d, s, r = %d, None, [0]
    if d < 0:
        p = sys.argv[1]
    else:
        compile('', '', 'exec')
        os.write(d, b'r')
        b, m, x, t = [], [], None, %s
        if t:
            y = 'atexit' in sys.modules
            import atexit
            def z():
                for f in sys.stdout, sys.stderr:
                    try:
                        f.flush()
                    except BaseException:
                        pass
                os._exit(r[0] & 255)
            atexit.register(z)
            if not y:
                del sys.modules['atexit']
            del atexit, y
        for q in t:
            os.write(d, b'w')
            x = os.read(d, 65536)
            if x != b'g':
                x = x[1:] if x[:1] == b'g' else x
                break
            x = None
            o, e, n = os.dup(1), os.dup(2), os.open(os.devnull, os.O_WRONLY)
            os.dup2(n, 1)
            os.dup2(n, 2)
            try:
                if q[0] == '#':
                    exec(q, {})
                else:
                    __import__(q)
            except BaseException:
                if q[0] != '#':
                    m.append(q)
            finally:
                os.dup2(o, 1)
                os.dup2(e, 2)
                os.close(o)
                os.close(e)
                os.close(n)
        else:
            if t:
                os.write(d, b'p' + ','.join(m).encode() + b'\n')
        if x is None:
            x = os.read(d, 65536)
        while x:
            b.append(x)
            x = os.read(d, 65536)
        p, _, s = b''.join(b).partition(b'\0')
        if not p:
            os._exit(0)
        p = os.fsdecode(p)
        os.write(d, b't')
        os.close(d)
        del b, m, t, x, _
    if hasattr(sys, 'orig_argv'):
        sys.orig_argv[len(sys.orig_argv) - (3 if d < 0 else 2):] = [p]
    sys.argv[:] = [p]
    sys.path.insert(0, '')
    sys.path_importer_cache[p] = None
    g = sys.modules['__main__'].__dict__
    del g['_sandbox']
    g['__file__'], g['__cached__'] = p, None
    g['__loader__'] = sys.modules['_frozen_importlib_external'].SourceFileLoader('__main__', p)
    try:
        if s is None:
            with open(p, 'rb') as f:
                s = f.read()
        c = compile(s, p, 'exec', dont_inherit=True)
        s = None
        exec(c, g)
    except SystemExit as e:
        k = e.code
        r[0] = 0 if k is None else k if isinstance(k, int) else 1
        raise
    except MemoryError as e:
        try:
            g.clear()
            e = e.with_traceback(e.__traceback__.tb_next)
            sys.excepthook(MemoryError, e, e.__traceback__)
            sys.stderr.flush()
        finally:
            os.kill(os.getpid(), 9)
            os._exit(137)
    except BaseException as e:
        e = e.with_traceback(e.__traceback__.tb_next)
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__
        if sys.version_info >= (3, 12):
            sys.last_exc = e
        sys.excepthook(type(e), e, e.__traceback__)
        g.pop('__file__', None)
        g.pop('__cached__', None)
        r[0] = 1
        sys.exit(1)
    g.pop('__file__', None)
    g.pop('__cached__', None)
_sandbox()
`

// pythonArgs is the child's argv after the interpreter: isolated, unbuffered
// (so output written before a kill is not lost in a buffer), no .pyc files
// in the working directory, then the preamble and, when the code comes in a
// file, the file's path. ctl is the socket the code comes on instead (ctlFD),
// or -1.
func pythonArgs(opts Options, snippet string, ctl int) []string {
	limits := [][2]int64{
		{rlimitCore, 0},
		{rlimitFsize, opts.maxFileSize()},
		{rlimitNproc, int64(opts.maxProcs())},
		{rlimitNofile, MaxOpenFiles},
	}
	if opts.MemoryLimit > 0 {
		limits = append(limits, [2]int64{rlimitAS, opts.MemoryLimit})
	}
	var l strings.Builder
	l.WriteString("(")
	for _, kv := range limits {
		fmt.Fprintf(&l, "(%d, %d), ", kv[0], kv[1])
	}
	l.WriteString(")")
	preload := opts.Preload
	if len(preload) > 0 && !opts.NoWarmUp {
		preload = append(slices.Clip(preload), warmUpSteps(preload)...)
	}
	args := []string{"-I", "-u", "-B", "-c", fmt.Sprintf(preamble, l.String(), opts.Nice, pyBool(opts.IdleCPU), ctl, pyTuple(preload))}
	if ctl < 0 {
		args = append(args, snippet)
	}
	return args
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
