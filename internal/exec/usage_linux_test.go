package exec

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// usageCode burns a known amount of CPU in three child processes and in an
// orphan (a grandchild whose parent exits first, reaped by whoever reaps
// orphans), and holds 64 MiB in the snippet's own process.
const usageCode = `import os, subprocess, sys, time
burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.1: pass\n"
for _ in range(3):
    subprocess.run([sys.executable, '-c', burn], check=True)
if os.fork() == 0:
    if os.fork() == 0:
        t = time.process_time()
        while time.process_time() - t < 0.2: pass
        open('orphan-done', 'w').close()
        os._exit(0)
    os._exit(0)
os.wait()
while not os.path.exists('orphan-done'):
    time.sleep(0.01)
time.sleep(0.05)
x = bytearray(64 << 20)
for i in range(0, len(x), 4096): x[i] = 1
print('done')
`

// checkUsage asserts the CPU of every process (0.5 s at least) and the
// 64 MiB are counted.
func checkUsage(t *testing.T, res wire.Result) {
	t.Helper()
	if res.ExitCode != 0 || res.Stdout != "done\n" {
		t.Fatalf("the snippet failed: %+v", res)
	}
	u := res.Usage
	t.Logf("usage %+v", u)
	if u.CPUMS < 450 {
		t.Errorf("cpu_ms %d: the children's and the orphan's 0.5 s are not all counted", u.CPUMS)
	}
	if u.MaxRSSKiB < 64<<10 {
		t.Errorf("max_rss_kib %d, below the 64 MiB the snippet held", u.MaxRSSKiB)
	}
}

// TestUsageLocal: a run of the local backend counts the CPU of its whole
// tree (isolated: everything its PID namespace reaped into python3).
func TestUsageLocal(t *testing.T) {
	t.Run("isolated", func(t *testing.T) {
		res, err := Run(context.Background(), Job{Code: usageCode, Timeout: 30 * time.Second},
			Options{Sandbox: sandboxFor(t, 2_000_000_006)})
		if err != nil {
			t.Fatal(err)
		}
		checkUsage(t, res)
		if res.Usage.Processes != 0 {
			t.Errorf("processes %d: the local backend cannot count them", res.Usage.Processes)
		}
	})
	t.Run("plain", func(t *testing.T) {
		// Without a PID namespace of its own, the orphan is reaped by our
		// sweep and its 0.2 s is lost; the rest is counted.
		res, err := Run(context.Background(), Job{Code: usageCode, Timeout: 30 * time.Second}, Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if res.Usage.CPUMS < 250 || res.Usage.MaxRSSKiB < 64<<10 {
			t.Errorf("usage %+v", res.Usage)
		}
	})
}

// TestUsageAsPodInit: as its PID namespace's init, as the runner is in a
// pod, Run counts every process and thread the run started, and the CPU of
// all of them, orphans included.
func TestUsageAsPodInit(t *testing.T) {
	asPodInit(t, "TestUsageAsPodInit", usageAsInit)
}

func usageAsInit(t *testing.T) {
	res, err := Run(context.Background(), Job{Code: usageCode, Timeout: 30 * time.Second}, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	checkUsage(t, res)
	// python3, three children, the orphan's parent and the orphan.
	if p := res.Usage.Processes; p < 6 || p > 8 {
		t.Errorf("processes %d, want 6 (and a thread or two of the interpreter at most)", p)
	}
	fmt.Println("usage as PID 1:", res.Usage)
}
