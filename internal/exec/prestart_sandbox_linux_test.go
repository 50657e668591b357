package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// asRun runs sh -c script as the run's uid and gid in the mount namespace
// of a waiting isolated run's python3: what anything that ran there before
// the job (the preload) could do. It returns the script's output.
func asRun(t *testing.T, p *Interp, uid uint32, script string) string {
	t.Helper()
	py := pythonOf(t, p)
	u := strconv.FormatUint(uint64(uid), 10)
	out, err := osexec.Command("nsenter", "-t", strconv.Itoa(py), "-m", "-S", u, "-G", u, "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	return string(out)
}

// pythonOf is the host pid of an isolated run's python3: its init's child.
func pythonOf(t *testing.T, p *Interp) int {
	t.Helper()
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.Pid(), p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	py, err := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil {
		t.Fatalf("the init's children: %q", kids)
	}
	return py
}

// TestPrestartedSandboxBeforeItsJob: while a pre-started isolated run waits,
// its own uid (all that runs in it: our preamble and the preload) can
// neither write into, swap nor plant anything in its working directory, so
// its job's files are exactly the job's; a code file planted where the code
// goes makes the init refuse the job, none of which runs. The control: the
// same shell writes where the run may write (/tmp).
func TestPrestartedSandboxBeforeItsJob(t *testing.T) {
	if _, err := osexec.LookPath("nsenter"); err != nil {
		t.Skip("no nsenter")
	}
	const uid = 2_000_000_011
	p, err := Prestart(Options{Sandbox: sandboxFor(t, uid)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitFor(t, p.Ready(), "ready")
	out := asRun(t, p, uid, `
for try in 'echo x > /tmp/work/in.txt' 'mkfifo /tmp/work/fifo' 'ln -s /etc/passwd /tmp/work/link' \
    'mv /tmp/work /tmp/moved' 'rmdir /tmp/work' 'chmod 777 /tmp/work' 'ls /tmp/work'; do
  if sh -c "$try" 2>/dev/null; then echo "ok: $try"; else echo "refused: $try"; fi
done
echo x > /tmp/control && echo "control ok"
stat -c '%u %a' /tmp/work`)
	t.Logf("before the job, as the run's uid:\n%s", out)
	if strings.Contains(out, "ok: ") || !strings.Contains(out, "control ok") || !strings.Contains(out, "\n0 711\n") {
		t.Errorf("the waiting run's uid reached its working directory, or the control failed:\n%s", out)
	}
	res, err := p.Run(context.Background(), Job{Code: "import os\nprint(sorted(os.listdir('.')), open('in.txt').read(), os.stat('.').st_uid)\n",
		Timeout: 10 * time.Second, Files: []File{{Path: "in.txt", Content: []byte("mine")}}})
	if err != nil || res.Stdout != fmt.Sprintf("['in.txt'] mine %d\n", uid) {
		t.Errorf("the job: %+v %v", res, err)
	}

	q, err := Prestart(Options{Sandbox: sandboxFor(t, uid+1)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	waitFor(t, q.Ready(), "ready")
	asRun(t, q, uid+1, "ln -s /tmp/work/evil.py "+sandboxSnippet)
	res, err = q.Run(context.Background(), Job{Code: "print('ran')", Timeout: 10 * time.Second})
	if !errors.Is(err, ErrNotTaken) || strings.Contains(res.Stdout, "ran") {
		t.Errorf("a planted code file: %+v %v, want the job refused, not run", res, err)
	}
}
