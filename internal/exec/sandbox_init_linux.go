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

// sandboxInit is the init's whole life; it returns only on failure.
func sandboxInit() error {
	// no_new_privs and the seccomp filter are per thread: set them on the
	// thread that calls execve.
	runtime.LockOSThread()
	sock := os.NewFile(initFD, "sandbox-init")
	err := initRun(sock)
	prefix := initErrHost
	var ie *initError
	if errors.As(err, &ie) && ie.job {
		prefix = initErrJob
	}
	fmt.Fprintf(sock, "%s%s\n", prefix, strings.ReplaceAll(err.Error(), "\n", " "))
	return err
}

func initRun(sock *os.File) error {
	r := bufio.NewReader(sock)
	cfg, files, err := readJob(r)
	if err != nil {
		return fmt.Errorf("read job: %w", err)
	}
	if err := mountSandbox(cfg.DiskLimit); err != nil {
		return err
	}
	if err := syscall.Sethostname([]byte("sandbox")); err != nil {
		return fmt.Errorf("set host name: %w", err)
	}
	if err := populate(cfg, files); err != nil {
		return err
	}
	if err := reportReady(); err != nil {
		return err
	}
	// Serve moves us into the run's cgroups meanwhile.
	if b, err := r.ReadByte(); err != nil || b != initGo {
		return fmt.Errorf("wait for serve: %v", err)
	}
	if err := syscall.Chdir(SandboxDir); err != nil {
		return fmt.Errorf("chdir: %w", err)
	}
	if err := dropPrivileges(cfg.UID, cfg.GID); err != nil {
		return err
	}
	if cfg.Seccomp {
		if err := installSeccomp(); err != nil {
			return err
		}
	}
	syscall.CloseOnExec(initFD)
	err = syscall.Exec(cfg.Python, append([]string{"python3"}, cfg.Args...), cfg.Env)
	return fmt.Errorf("exec %s: %w", cfg.Python, err)
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

// populate writes the code and the job's files into the fresh /tmp. Nothing
// but this process can see it yet, so no link or FIFO can be in the way.
func populate(cfg initConfig, files []File) error {
	uid, gid := int(cfg.UID), int(cfg.GID)
	if err := os.WriteFile(sandboxSnippet, []byte(cfg.Code), 0o444); err != nil {
		return fmt.Errorf("write code: %w", err)
	}
	if err := os.Mkdir(SandboxDir, 0o700); err != nil {
		return fmt.Errorf("make working directory: %w", err)
	}
	if err := os.Lchown(SandboxDir, uid, gid); err != nil {
		return fmt.Errorf("make working directory: %w", err)
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
	return nil
}

// dropPrivileges becomes uid and gid with no supplementary groups and no
// way back: a change of every uid from 0 clears all capabilities, and
// no_new_privs makes setuid and file capabilities inert for good.
func dropPrivileges(uid, gid uint32) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("drop groups: %w", err)
	}
	if err := syscall.Setresgid(int(gid), int(gid), int(gid)); err != nil {
		return fmt.Errorf("set gid: %w", err)
	}
	if err := syscall.Setresuid(int(uid), int(uid), int(uid)); err != nil {
		return fmt.Errorf("set uid: %w", err)
	}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("set no_new_privs: %w", e)
	}
	return nil
}
