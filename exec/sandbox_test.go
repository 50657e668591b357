package exec

import (
	"context"
	"os"
	"strings"
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
print(os.getuid(), os.getgid(), os.getgroups(), os.getpid(), os.getcwd())
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
	if !strings.HasPrefix(res.Stdout, "2000000001 2000000001 [] 1 /tmp/work\n['in'] A\n") {
		t.Errorf("stdout %q", res.Stdout)
	}
}
