package modes

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// TestCodeFileAsRootIsolated: `run --code-file` as root isolates the
// snippet like the local backend does. A second --code-file run, told the
// first one's host pid, cannot rewrite its code, write its memory or signal
// it; with --isolation none (the control) it can do all three.
func TestCodeFileAsRootIsolated(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: as another user --code-file runs as that user, by design")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	dir := t.TempDir()
	script := func(name string) string {
		b, err := os.ReadFile("../exec/testdata/attack/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		isolation string
		protected bool
	}{{"auto", true}, {"none", false}} {
		t.Run("isolation "+tc.isolation, func(t *testing.T) {
			runFile := func(code string) wire.Result {
				f := filepath.Join(dir, tc.isolation+strconv.Itoa(len(code))+".py")
				if err := os.WriteFile(f, []byte(code), 0o644); err != nil {
					t.Fatal(err)
				}
				c := RunCmd{CodeFile: f, Timeout: 30 * time.Second, MaxTimeout: time.Minute, MaxOutput: 1 << 20, Isolation: tc.isolation}
				var out bytes.Buffer
				if err := c.runFile(context.Background(), &out); err != nil {
					t.Errorf("runFile: %v", err)
				}
				var res wire.Result
				json.Unmarshal(out.Bytes(), &res)
				return res
			}
			var victim wire.Result
			var wg sync.WaitGroup
			wg.Go(func() { victim = runFile(script("victim.py")) })
			pid := snippetChild(t)
			attacker := runFile(strings.Replace(script("attacker.py"), "P = VICTIM_PID", "P = "+strconv.Itoa(pid), 1))
			syscall.Kill(pid, syscall.SIGUSR2)
			wg.Wait()
			t.Logf("attacker:\n%s%s\nvictim:\n%s%s", attacker.Stdout, attacker.Stderr, victim.Stdout, victim.Stderr)
			for _, a := range []string{"write-code", "write-memory", "signal"} {
				if blocked := strings.Contains(attacker.Stdout, a+" blocked"); blocked != tc.protected {
					t.Errorf("attempt %s: blocked %v, want %v", a, blocked, tc.protected)
				}
			}
			for _, want := range []string{"code intact\n", "memory VICTIM-MARKER-\n", "signals []\n"} {
				if strings.Contains(victim.Stdout, want) != tc.protected {
					t.Errorf("victim reports %q: %v, want %v", strings.TrimSpace(want), !tc.protected, tc.protected)
				}
			}
		})
	}
}

// snippetChild waits for a process below this one that runs a snippet and
// has a SIGUSR2 handler, and returns its pid as the host sees it: a child
// (isolation none), or a grandchild, its run's init's child (isolated).
func snippetChild(t *testing.T) int {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, k := range below("self", 2) {
			cmd, _ := os.ReadFile("/proc/" + k + "/cmdline")
			status, _ := os.ReadFile("/proc/" + k + "/status")
			if !strings.Contains(string(cmd), "def _sandbox():") {
				continue
			}
			for line := range strings.SplitSeq(string(status), "\n") {
				v, ok := strings.CutPrefix(line, "SigCgt:")
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); ok && err == nil && m&(1<<(syscall.SIGUSR2-1)) != 0 {
					pid, _ := strconv.Atoi(k)
					return pid
				}
			}
		}
	}
	t.Fatal("no snippet child with a SIGUSR2 handler appeared")
	return 0
}

// below lists the processes below pid, down to depth levels.
func below(pid string, depth int) []string {
	if depth == 0 {
		return nil
	}
	var out []string
	tasks, _ := os.ReadDir("/proc/" + pid + "/task")
	for _, task := range tasks {
		kids, _ := os.ReadFile("/proc/" + pid + "/task/" + task.Name() + "/children")
		for _, k := range strings.Fields(string(kids)) {
			out = append(append(out, k), below(k, depth-1)...)
		}
	}
	return out
}
