package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sandboxFor returns a Sandbox for a test, or skips where isolation needs
// what the test lacks (root).
func sandboxFor(t *testing.T, uid uint32) *Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("isolated runs need root; the local backend's unprivileged path is tested in package local")
	}
	if _, err := findPython("", nil); err != nil {
		t.Skip(err)
	}
	cg, err := FindCgroups()
	if err != nil {
		t.Logf("no cgroups here: %v", err)
	}
	return &Sandbox{UID: uid, GID: uid, Cgroups: cg, MemoryLimit: 256 << 20}
}

func TestSandboxBasics(t *testing.T) {
	sb := sandboxFor(t, 2_000_000_001)
	code := `import os, sys
print(os.getuid(), os.getgid(), os.getgroups(), os.getpid() > 1, os.getcwd())
print(sorted(os.listdir('.')), open('in/a.txt').read())
print(sorted(os.listdir('/proc'))[:0], [p for p in os.listdir('/proc') if p.isdigit()])
for d in ['/tmp', '/var/tmp', '/dev/shm', '.', '/etc', '/root', '/home']:
    try:
        open(os.path.join(d, 'probe'), 'w').write('x'); print(d, 'writable')
    except OSError as e:
        print(d, e.strerror)
print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0], open('/proc/self/status').read().split('Seccomp:')[1].split()[0])
`
	res, err := Run(context.Background(), Job{Code: code, Timeout: 10 * time.Second,
		Files: []File{{Path: "in/a.txt", Content: []byte("A")}}}, Options{Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	// python3 is not its namespace's init: the run's init stays PID 1.
	if !strings.HasPrefix(res.Stdout, "2000000001 2000000001 [] True /tmp/work\n['in'] A\n") {
		t.Errorf("stdout %q", res.Stdout)
	}
}

// TestInputFilesNeverBlock: a FIFO or a symlink waiting where an input file
// goes fails the job at once rather than blocking serve or writing
// elsewhere; in a sandbox nothing can be waiting, since the files go into a
// tmpfs made for the run. The control shows the planted FIFO is live: a
// plain open for writing, as a naive writer does, would block on it.
func TestInputFilesNeverBlock(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "data.txt"), 0o666); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	// The control: no reader, so a blocking open would wait for ever.
	if _, err := os.OpenFile(filepath.Join(dir, "data.txt"), os.O_WRONLY|syscall.O_NONBLOCK, 0); !errors.Is(err, syscall.ENXIO) {
		t.Fatalf("control: the FIFO is not waiting for a reader: %v", err)
	}
	for _, name := range []string{"data.txt", "link.txt"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := Run(ctx, Job{Code: "pass", Files: []File{{Path: name, Content: []byte("x")}}}, Options{Dir: dir})
		cancel()
		if !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s planted: Run = %v, want an invalid job at once", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(outside, "victim")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written through the symlink: %v", err)
	}
}

// userNSProbe tries to make a user namespace in the two ways the C library
// offers (unshare, and clone via a new process), and reports no_new_privs.
const userNSProbe = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
pid = os.fork()
if pid == 0:
    os._exit(0 if libc.unshare(CLONE_NEWUSER) == 0 else 1)
_, st = os.waitpid(pid, 0)
print('unshare', 'ok' if os.waitstatus_to_exitcode(st) == 0 else 'refused')
r = os.system('unshare --user true 2>/dev/null')
print('unshare(1)', 'ok' if r == 0 else 'refused')
print('no_new_privs', open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])
`

// TestNoNewUserNamespaces: inside a sandbox a run cannot make a user
// namespace and has no_new_privs; with the seccomp filter off (the control)
// the same code makes one.
func TestNoNewUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noSeccomp bool
	}{{"sandbox", false}, {"control: no seccomp filter", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sb := sandboxFor(t, 2_000_000_003)
			if err := SeccompSupported(); err != nil {
				t.Skip(err)
			}
			sb.NoSeccomp = tc.noSeccomp
			res, err := Run(context.Background(), Job{Code: userNSProbe, Timeout: 10 * time.Second}, Options{Sandbox: sb})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s%s", res.Stdout, res.Stderr)
			want := "unshare refused\nunshare(1) refused\nno_new_privs 1\n"
			if tc.noSeccomp {
				want = "unshare ok\nunshare(1) ok\nno_new_privs 1\n"
			}
			if res.Stdout != want {
				t.Errorf("stdout %q, want %q", res.Stdout, want)
			}
		})
	}
}

// keyProbe adds a key readable by all to the run's user keyring, reads it
// back and removes it (the control must leave nothing in the kernel); the
// test fills in the architecture's add_key and keyctl numbers.
const keyProbe = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
key = libc.syscall(%d, b"user", b"probe", b"secret", 6, -4)  # add_key into KEY_SPEC_USER_KEYRING
if key < 0:
    print("add_key", os.strerror(ctypes.get_errno()))
else:
    buf = ctypes.create_string_buffer(64)
    n = libc.syscall(%d, 11, ctypes.c_long(key), buf, 64)  # KEYCTL_READ
    libc.syscall(%d, 21, ctypes.c_long(key))  # KEYCTL_INVALIDATE
    print("read", buf.raw[:n].decode())
`

// TestNoKeyrings: a run cannot put a key in the kernel, where it would
// outlive the run; with the seccomp filter off (the control) it can.
func TestNoKeyrings(t *testing.T) {
	a, err := thisArch()
	if err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		name      string
		noSeccomp bool
		want      string
	}{{"sandbox", false, "add_key Operation not permitted\n"}, {"control: no seccomp filter", true, "read secret\n"}} {
		t.Run(tc.name, func(t *testing.T) {
			sb := sandboxFor(t, 2_000_000_009)
			sb.NoSeccomp = tc.noSeccomp
			code := fmt.Sprintf(keyProbe, a.addKey, a.keyctl, a.keyctl)
			res, err := Run(context.Background(), Job{Code: code, Timeout: 10 * time.Second}, Options{Sandbox: sb})
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != tc.want {
				t.Errorf("stdout %q, want %q (stderr %s)", res.Stdout, tc.want, res.Stderr)
			}
		})
	}
}

// TestOwnPTYs: a run's pseudo-terminals come from a devpts of its own,
// numbered from 0 and bounded at ptsMax; from the host's pool a run could
// take as many as its descriptors allow (the control: this process opens
// more than that in the host's).
func TestOwnPTYs(t *testing.T) {
	sb := sandboxFor(t, 2_000_000_010)
	res, err := Run(context.Background(), Job{Code: `
import os
fds = []
try:
    while True:
        fds.append(os.openpty())
except OSError as e:
    print(len(fds), os.ttyname(fds[0][1]), e.strerror)
`, Timeout: 10 * time.Second}, Options{Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d /dev/pts/0 No space left on device\n", ptsMax); res.Stdout != want {
		t.Errorf("stdout %q, want %q (stderr %s)", res.Stdout, want, res.Stderr)
	}
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for range ptsMax + 1 {
		f, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			t.Fatalf("control: the host's pool gave %d: %v", len(held), err)
		}
		held = append(held, f)
	}
}

// TestOwnProc: a sandbox's /proc shows its own processes alone (its init,
// PID 1, and python3); the host's (the control, from this process) shows
// many more.
func TestOwnProc(t *testing.T) {
	sb := sandboxFor(t, 2_000_000_004)
	res, err := Run(context.Background(), Job{Code: "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()])\n",
		Timeout: 10 * time.Second}, Options{Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "True\n" {
		t.Errorf("the sandbox's /proc lists more than its init and python3: %q", res.Stdout)
	}
	host, _ := os.ReadDir("/proc")
	if n := len(host); n < 10 {
		t.Errorf("control: the host's /proc has only %d entries", n)
	}
}

// TestSandboxCPUCgroup: where the host has the cpu controller, a run is in a
// cpu cgroup of its own, so that its processes weigh like one against serve.
func TestSandboxCPUCgroup(t *testing.T) {
	sb := sandboxFor(t, 2_000_000_011)
	if sb.Cgroups == nil || sb.Cgroups.CPU == "" {
		t.Skip("no cpu controller here")
	}
	res, err := Run(context.Background(), Job{Code: "print(open('/proc/self/cgroup').read())", Timeout: 10 * time.Second}, Options{Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for line := range strings.SplitSeq(res.Stdout, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (hasController(parts[1], "cpu") || (sb.Cgroups.V2 && parts[0] == "0")) {
			found = strings.Contains(parts[2], "sandbox-run-")
		}
	}
	if !found {
		t.Errorf("the run is not in a cpu cgroup of its own:\n%s", res.Stdout)
	}
}
