package local

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// unprivUID is the uid TestUnprivileged runs this test binary as.
const unprivUID = 1000

// TestUnprivileged runs this package's tests again as an unprivileged user,
// so that the path a developer's machine takes (a user namespace of our own,
// or no namespaces where the host forbids that) is tested where we are root.
// It starts a child process, which exec.Run allows only while no run is in
// flight: tests here run one at a time.
func TestUnprivileged(t *testing.T) {
	if os.Getenv("SANDBOX_TEST_UNPRIVILEGED") != "" {
		t.Skip("already the unprivileged run")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: the other tests already take the unprivileged path")
	}
	requirePython(t)
	// The build cache is root's; copy the binary where the user can run it.
	dir, err := os.MkdirTemp("", "sandbox-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "local.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^(TestExecutePrints|TestFreshDirectory|TestPIDNamespace|TestNoNetwork)$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "SANDBOX_TEST_UNPRIVILEGED=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivUID, Gid: unprivUID, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", unprivUID, out)
	if err != nil {
		t.Fatalf("tests as uid %d: %v", unprivUID, err)
	}
	if !strings.Contains(string(out), "--- PASS: TestExecutePrints") {
		t.Fatal("the unprivileged run did not run the tests")
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
