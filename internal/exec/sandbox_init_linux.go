package exec

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"unsafe"

	"github.com/sandboxd/sandbox/wire"
)

// The run's init: the process between serve and python3 in an isolated run.
// See sandbox.go for what it does and why.

// initConfig is what serve sends the init before the files.
type initConfig struct {
	UID, GID  uint32
	DiskLimit int64
	Python    string
	Args      []string // python3's argv after argv[0]
	Env       []string
	Code      string
	Files     int // how many file frames follow
	Seccomp   bool
}

// Replies of the init on its socket. An error line starts with one of the
// two prefixes; the job's fault is told apart from the host's.
const (
	initReady      = "ready\n"
	initStarted    = "started\n"
	initWritten    = "written\n"
	initErrJob     = "invalid: "
	initErrHost    = "error: "
	initGo         = 'g'
	maxConfigBytes = 4 << 20 // the code (at most the API's body) and its argv
)

// Mount flags and syscalls the syscall package lacks.
const (
	sysMountSetattr   = 442 // the same number on every architecture
	atRecursive       = 0x8000
	mountAttrRdonly   = 0x1
	prSetNoNewPrivs   = 38
	prSetSeccomp      = 22
	seccompModeFilter = 2
)

// initError is an error the init reports on its socket.
type initError struct {
	job bool
	err error
}

func (e *initError) Error() string { return e.err.Error() }

// sandboxInit is the init's whole life: it returns on failure, with the
// status 127, or once python3 has ended, with python3's status.
func sandboxInit() int {
	// no_new_privs and the seccomp filter are per thread: set them on the
	// thread that forks python3, which inherits them.
	runtime.LockOSThread()
	sock := os.NewFile(initFD, "sandbox-init")
	// Neither socket may reach python3 but as its ctlFD (startPython).
	syscall.CloseOnExec(initFD)
	syscall.CloseOnExec(initCtlFD)
	status, err := initRun(sock)
	if err == nil {
		return status
	}
	report(sock, err)
	return 127
}

// report writes err to serve as the init's answer.
func report(sock *os.File, err error) {
	prefix := initErrHost
	var ie *initError
	if errors.As(err, &ie) && ie.job {
		prefix = initErrJob
	}
	fmt.Fprintf(sock, "%s%s\n", prefix, strings.ReplaceAll(err.Error(), "\n", " "))
}

// initRun sets the sandbox up, starts python3 waiting for its job, then
// writes the job when it comes and waits for python3's end.
func initRun(sock *os.File) (int, error) {
	r := bufio.NewReader(sock)
	cfg, _, err := readJob(r)
	if err != nil {
		return 0, fmt.Errorf("read config: %w", err)
	}
	if err := mountSandbox(cfg.DiskLimit); err != nil {
		return 0, err
	}
	if err := syscall.Sethostname([]byte("sandbox")); err != nil {
		return 0, fmt.Errorf("set host name: %w", err)
	}
	// Root's until the job's files are in it (populate): python3 can enter
	// it meanwhile but neither write into it nor swap it for a link.
	if err := os.Mkdir(SandboxDir, 0o711); err != nil {
		return 0, fmt.Errorf("make working directory: %w", err)
	}
	if err := reportReady(); err != nil {
		return 0, err
	}
	// Serve moves us into the run's cgroups meanwhile.
	if b, err := r.ReadByte(); err != nil || b != initGo {
		return 0, fmt.Errorf("wait for serve: %v", err)
	}
	pid, err := startPython(cfg)
	if err != nil {
		return 0, err
	}
	if _, err := sock.WriteString(initStarted); err != nil {
		return 0, fmt.Errorf("report started: %w", err)
	}
	// The job may never come (serve kills a pre-started run it closes); the
	// run ends with python3 either way.
	go takeJob(sock, r, cfg) // owned: ends with its socket, or with this process
	return reap(pid), nil
}

// startPython forks python3 as the run's uid and gid with no groups,
// no_new_privs and the seccomp filter (both inherited from this thread),
// in the working directory, with ctlFD its socket to serve.
func startPython(cfg initConfig) (int, error) {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		return 0, fmt.Errorf("set no_new_privs: %w", e)
	}
	if cfg.Seccomp {
		if err := installSeccomp(); err != nil {
			return 0, err
		}
	}
	pid, err := syscall.ForkExec(cfg.Python, append([]string{"python3"}, cfg.Args...), &syscall.ProcAttr{
		Dir:   SandboxDir,
		Env:   cfg.Env,
		Files: []uintptr{0, 1, 2, initCtlFD}, // ctlFD
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: cfg.UID, Gid: cfg.GID, Groups: []uint32{}},
		},
	})
	syscall.Close(initCtlFD) // python3's now: its end must end the socket
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", cfg.Python, err)
	}
	return pid, nil
}

// takeJob reads the job, writes its code and files and answers serve.
func takeJob(sock *os.File, r *bufio.Reader, cfg initConfig) {
	defer sock.Close()
	job, files, err := readJob(r)
	if err == nil {
		job.UID, job.GID = cfg.UID, cfg.GID
		err = populate(job, files)
	} else {
		err = fmt.Errorf("read job: %w", err)
	}
	if err != nil {
		report(sock, err)
		return
	}
	sock.WriteString(initWritten)
	// The files were read into memory, which the run's cgroup counts.
	files = nil
	debug.FreeOSMemory()
}

// reap waits for every process that ends up the init's child (python3, and
// the orphans the kernel hands a namespace's init) until python3 ends, and
// returns python3's status as an exit status: its code, or 128 plus the
// signal that killed it. The init then exits, and with it, by the kernel's
// hand, every process still in the namespace.
func reap(python int) int {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil:
			return 127 // no child left: cannot happen while python3 lives
		case pid != python:
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// reportReady tells serve the run is set up, handing it a descriptor of
// the working directory along.
func reportReady() error {
	wd, err := syscall.Open(SandboxDir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open working directory: %w", err)
	}
	defer syscall.Close(wd)
	if err := syscall.Sendmsg(initFD, []byte(initReady), syscall.UnixRights(wd), nil, 0); err != nil {
		return fmt.Errorf("report ready: %w", err)
	}
	return nil
}

// readJob reads the config and the files: a length-prefixed JSON config,
// then per file a length-prefixed path and content.
func readJob(r io.Reader) (initConfig, []File, error) {
	var cfg initConfig
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return cfg, nil, err
	}
	if n > maxConfigBytes {
		return cfg, nil, fmt.Errorf("config of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return cfg, nil, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, nil, err
	}
	if cfg.Files > MaxFiles {
		return cfg, nil, fmt.Errorf("%d files", cfg.Files)
	}
	files := make([]File, cfg.Files)
	total := 0
	for i := range files {
		var pl uint32
		var cl uint64
		if err := binary.Read(r, binary.LittleEndian, &pl); err != nil {
			return cfg, nil, err
		}
		if pl > wire.MaxPathLen {
			return cfg, nil, fmt.Errorf("path of %d bytes", pl)
		}
		p := make([]byte, pl)
		if _, err := io.ReadFull(r, p); err != nil {
			return cfg, nil, err
		}
		if err := binary.Read(r, binary.LittleEndian, &cl); err != nil {
			return cfg, nil, err
		}
		if total += int(cl); cl > MaxFilesBytes || total > MaxFilesBytes {
			return cfg, nil, errors.New("files over the size limit")
		}
		c := make([]byte, cl)
		if _, err := io.ReadFull(r, c); err != nil {
			return cfg, nil, err
		}
		files[i] = File{Path: string(p), Content: c}
	}
	return cfg, files, nil
}

// writeJob is readJob's other half, in serve.
func writeJob(w io.Writer, cfg initConfig, files []File) error {
	cfg.Files = len(files)
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	binary.Write(bw, binary.LittleEndian, uint32(len(b)))
	bw.Write(b)
	for _, f := range files {
		binary.Write(bw, binary.LittleEndian, uint32(len(f.Path)))
		bw.WriteString(f.Path)
		binary.Write(bw, binary.LittleEndian, uint64(len(f.Content)))
		bw.Write(f.Content)
	}
	return bw.Flush()
}

// mountSandbox gives this mount namespace its read-only view of the host, a
// /proc of its own PID namespace and private tmpfs where a run may write.
func mountSandbox(disk int64) error {
	// Nothing we mount may propagate back to the host's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := readOnlyRoot(); err != nil {
		return err
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", disk, sandboxInodes)
	for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		// A missing one (or a symlink to elsewhere) stays what it is: the
		// root is read-only, so the run cannot make it.
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			if dir == "/tmp" {
				return fmt.Errorf("mount tmpfs: %s is not a directory", dir)
			}
			continue
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
		}
	}
	// Pseudo-terminals of the run's own: the kernel opens /dev/ptmx in the
	// devpts beside it, and the host's is one pool for every run and the
	// host itself (a run that took them all left none for anyone). A new
	// instance holds ptsMax, and the kernel keeps pty.reserve for the host's.
	if fi, err := os.Lstat("/dev/pts"); err == nil && fi.IsDir() {
		if err := syscall.Mount("devpts", "/dev/pts", "devpts", syscall.MS_NOSUID|syscall.MS_NOEXEC,
			fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,max=%d", ptsMax)); err != nil {
			return fmt.Errorf("mount devpts on /dev/pts: %w", err)
		}
	}
	return nil
}

// ptsMax is how many pseudo-terminals a run may hold at once: a few are
// what a terminal program under test needs.
const ptsMax = 64

// readOnlyRoot makes every mount read-only, in one call where the kernel has
// mount_setattr (5.12), else one remount per mount point.
func readOnlyRoot() error {
	attr := struct{ set, clr, propagation, userns uint64 }{set: mountAttrRdonly}
	root := []byte("/\x00")
	dirfd := atFDCWD
	_, _, e := syscall.Syscall6(sysMountSetattr, uintptr(dirfd), uintptr(unsafe.Pointer(&root[0])),
		atRecursive, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	runtime.KeepAlive(root)
	if e == 0 {
		return nil
	}
	if e != syscall.ENOSYS {
		return fmt.Errorf("make mounts read-only: %w", e)
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("make mounts read-only: %w", err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		var st syscall.Statfs_t
		if err := syscall.Statfs(mp, &st); err != nil {
			continue // covered by a later mount, or gone
		}
		// A bind remount replaces the per-mount flags: keep the others.
		// statfs's ST_* bits equal the MS_* ones except ST_RELATIME.
		keep := uintptr(st.Flags) & (syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC |
			syscall.MS_NOATIME | syscall.MS_NODIRATIME)
		if st.Flags&stRelatime != 0 {
			keep |= syscall.MS_RELATIME
		}
		if err := syscall.Mount("", mp, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|keep, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", mp, err)
		}
	}
	return nil
}

const (
	atFDCWD    = -100 // AT_FDCWD
	stRelatime = 4096 // ST_RELATIME
)

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	octal := func(c byte) bool { return c >= '0' && c <= '7' }
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && octal(s[i+1]) && octal(s[i+2]) && octal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// populate writes the code and the job's files into the run's /tmp, then
// gives the working directory to the run. Only this process can write in
// the working directory until then (root's, 0711), so no link or FIFO can
// be waiting in it; the code's file is made new, never followed.
func populate(cfg initConfig, files []File) error {
	uid, gid := int(cfg.UID), int(cfg.GID)
	code, err := os.OpenFile(sandboxSnippet, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o444)
	if err != nil {
		return fmt.Errorf("write code: %w", err)
	}
	_, err = code.WriteString(cfg.Code)
	if cerr := code.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write code: %w", err)
	}
	root, err := os.OpenRoot(SandboxDir)
	if err != nil {
		return fmt.Errorf("open working directory: %w", err)
	}
	defer root.Close()
	owner := &[2]int{uid, gid}
	for _, f := range files {
		if err := wire.ValidatePath(f.Path); err != nil {
			return &initError{job: true, err: err}
		}
		if d := path.Dir(f.Path); d != "." {
			if err := mkdirOwned(root, d, owner); err != nil {
				return &initError{job: true, err: fmt.Errorf("write file %q: %w", f.Path, err)}
			}
		}
		if err := writeNew(root, f); err != nil {
			return &initError{job: !isHostFault(err), err: fmt.Errorf("write file %q: %w", f.Path, err)}
		}
		if err := root.Lchown(f.Path, uid, gid); err != nil {
			return fmt.Errorf("write file %q: %w", f.Path, err)
		}
	}
	if err := root.Chmod(".", 0o700); err != nil {
		return fmt.Errorf("give working directory: %w", err)
	}
	if err := root.Lchown(".", uid, gid); err != nil {
		return fmt.Errorf("give working directory: %w", err)
	}
	return nil
}
