package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// outputsCode writes output files, then plants what a hostile snippet
// would: symlinks to the host's secrets (absolute paths, which a reader on
// the host resolves on the host) and a FIFO. %q is the secret's host path.
const outputsCode = `import os
os.makedirs('out/d', exist_ok=True)
open('out/r.csv', 'w').write('a,b\n1,2\n')
open('out/d/deep.txt', 'w').write('deep')
open('chart.png', 'wb').write(bytes(range(256)))
os.symlink(%q, 'leak.txt')
os.symlink('/etc/shadow', 'shadow.txt')
os.symlink('/etc', 'etc')
os.mkfifo('pipe.txt')
print('written')
`

// TestSandboxOutputs: an isolated run's files come back from its private
// tmpfs through the descriptor its init handed over. The symlinks it
// planted are listed and never followed, so no host file is read; the
// control is a naive reader on the host side that opens the same names
// below that descriptor's path (/proc/self/fd/N/leak.txt), which the
// kernel resolves on the host, and reads the secret.
func TestSandboxOutputs(t *testing.T) {
	sb := sandboxFor(t, 2_000_000_003)
	secret, content := hostSecret(t)
	var naive string
	collectHook = func(stage string, dirfd int, name string) {
		if stage == "open" && name == "chart.png" {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d/leak.txt", dirfd))
			naive = string(b)
		}
	}
	defer func() { collectHook = nil }()
	res, err := Run(context.Background(), Job{Code: fmt.Sprintf(outputsCode, secret), Timeout: 10 * time.Second,
		Outputs: []string{"*.txt", "*.png", "out/**", "etc/*"}}, Options{Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Stdout != "written\n" {
		t.Fatalf("the snippet failed: %+v", res)
	}
	if naive != content {
		t.Fatalf("control: a path-based read below the working directory's descriptor gave %q; the attack does not work here", naive)
	}
	noSecret(t, res.Files, content)
	m := byPath(t, res.Files)
	for name, why := range map[string]string{"leak.txt": skipSymlink, "shadow.txt": skipSymlink, "etc": skipSymlink, "pipe.txt": skipFIFO} {
		if f := m[name]; f.Skipped != why {
			t.Errorf("%s: %+v, want skipped %q", name, f, why)
		}
	}
	if f := m["out/r.csv"]; f.Content != "a,b\n1,2\n" || f.Encoding != wire.EncodingUTF8 {
		t.Errorf("out/r.csv: %+v", f)
	}
	if b, err := m["chart.png"].Bytes(); err != nil || len(b) != 256 || m["chart.png"].Encoding != wire.EncodingBase64 {
		t.Errorf("chart.png: %d bytes, %v", len(b), err)
	}
	if m["out/d/deep.txt"].Content != "deep" {
		t.Errorf("out/d/deep.txt: %+v", m["out/d/deep.txt"])
	}
	if res.FilesIncomplete {
		t.Error("incomplete")
	}
	t.Logf("listed %q", paths(res.Files))
}

// TestOutputsAfterTimeout: a run killed at its deadline still hands back
// what it wrote, isolated or not.
func TestOutputsAfterTimeout(t *testing.T) {
	code := "open('partial.csv', 'w').write('x\\n1\\n')\nwhile True: pass\n"
	for _, isolated := range []bool{false, true} {
		t.Run(fmt.Sprint("isolated=", isolated), func(t *testing.T) {
			opts := Options{Dir: t.TempDir()}
			if isolated {
				opts = Options{Sandbox: sandboxFor(t, 2_000_000_004)}
			}
			res, err := Run(context.Background(), Job{Code: code, Timeout: time.Second, Outputs: []string{"*.csv"}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !res.TimedOut || len(res.Files) != 1 || res.Files[0].Content != "x\n1\n" {
				t.Fatalf("timed out %v, files %+v", res.TimedOut, res.Files)
			}
		})
	}
}

// TestOutputsAfterOOM: an isolated run killed for memory still hands back
// what it wrote (its tmpfs is kept alive by the descriptor, not by the
// run's processes).
func TestOutputsAfterOOM(t *testing.T) {
	sb := sandboxFor(t, 2_000_000_005)
	if sb.Cgroups == nil || sb.Cgroups.Memory == "" {
		t.Skip("no memory cgroup: an out-of-memory kill is the rlimit's here")
	}
	sb.MemoryLimit = 128 << 20
	code := "open('before.txt', 'w').write('ok')\nx = []\nwhile True: x.append(bytearray(1 << 20))\n"
	res, err := Run(context.Background(), Job{Code: code, Timeout: 20 * time.Second, Outputs: []string{"*.txt"}}, Options{Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OOMKilled || len(res.Files) != 1 || res.Files[0].Content != "ok" {
		t.Fatalf("oom %v, files %+v, stderr %q", res.OOMKilled, res.Files, res.Stderr)
	}
}

// TestOutputPatternsRefused: a pattern that would leave the working
// directory is an invalid job, and nothing runs.
func TestOutputPatternsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"../*", "/etc/*", "a/../../b"} {
		_, err := Run(context.Background(), Job{Code: "open('ran', 'w')", Outputs: []string{p}}, Options{Dir: dir})
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), "pattern") {
			t.Errorf("%q: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the snippet ran")
	}
}
