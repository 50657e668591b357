package local

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sbexec "github.com/sandboxd/sandbox/internal/exec"
)

// benchDataSnippet is the data snippet of exec's BenchmarkPreload and of
// make bench-kind: a frame, its describe() and a chart saved as PNG.
const benchDataSnippet = `import numpy as np, pandas as pd, matplotlib.pyplot as plt
df = pd.DataFrame({"x": np.arange(100), "y": np.random.default_rng(0).normal(size=100)})
print(df.describe())
df.plot(x="x", y="y")
plt.savefig("plot.png")
`

// BenchmarkWarm sets side by side, in turns, the data snippet and
// print(1) on two local backends with this host's default isolation: one
// with its pre-started interpreters (exec.DefaultPreload imported) and one
// that starts python3 for every job, from Execute to its result. Before
// each job on the first it waits, untimed, until a pre-started interpreter
// has done its preload, as an agent's next call finds one after its
// model's turn. It also reports what a waiting preloaded interpreter holds:
// its python3's CPU time and the memory charged to its run's cgroup.
func BenchmarkWarm(b *testing.B) {
	if osexec.Command("/usr/bin/python3", "-I", "-c", "import numpy, pandas, matplotlib").Run() != nil {
		b.Skip("no numpy, pandas and matplotlib for /usr/bin/python3 (Debian: python3-pandas python3-matplotlib)")
	}
	preload, _ := sbexec.ParsePreload(sbexec.DefaultPreload)
	log := slog.New(slog.DiscardHandler)
	warm, err := New(context.Background(), Options{Python: "/usr/bin/python3", Preload: preload, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer warm.Close()
	cold, err := New(context.Background(), Options{Python: "/usr/bin/python3", Warm: -1, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer cold.Close()
	b.Logf("sandboxed %v; %d pre-started interpreters", warm.Sandboxed(), warm.opts.Warm)
	jobs := []struct {
		name, want string
		job        sbexec.Job
	}{
		{"data", "count", sbexec.Job{Code: benchDataSnippet, Timeout: 60 * time.Second}},
		{"print1", "1", sbexec.Job{Code: "print(1)", Timeout: 20 * time.Second}},
	}
	times := map[string][]time.Duration{}
	var cpu, mem []float64
	for b.Loop() {
		for _, j := range jobs {
			t0 := time.Now()
			r := waitPreloaded(b, warm)
			times["preload-wait"] = append(times["preload-wait"], time.Since(t0))
			if c, m, ok := holds(r); ok {
				cpu, mem = append(cpu, c), append(mem, m)
			}
			taken := warm.warmTaken.Load()
			times[j.name+"-warm"] = append(times[j.name+"-warm"], timeExecute(b, warm, j.job, j.want))
			if warm.warmTaken.Load() != taken+1 {
				b.Fatal("the job did not run on a pre-started interpreter")
			}
			times[j.name+"-cold"] = append(times[j.name+"-cold"], timeExecute(b, cold, j.job, j.want))
		}
	}
	for name, d := range times {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), name+"-p50-ns")
		b.ReportMetric(float64(d[len(d)*9/10].Nanoseconds()), name+"-p90-ns")
	}
	if len(cpu) > 0 {
		slices.Sort(cpu)
		slices.Sort(mem)
		b.ReportMetric(cpu[len(cpu)/2], "waiting-python3-cpu-ms")
		b.ReportMetric(mem[len(mem)/2], "waiting-cgroup-MiB")
	}
}

// waitPreloaded waits until w's pool has an interpreter whose preload is
// done and returns it (left in the pool).
func waitPreloaded(b *testing.B, w *Backend) *warmRun {
	b.Helper()
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		w.warm.mu.Lock()
		for _, r := range w.warm.idle {
			if isClosed(r.p.Preloaded()) {
				w.warm.mu.Unlock()
				if m := r.p.Missing(); len(m) > 0 {
					b.Fatalf("the preload lacks %v", m)
				}
				return r
			}
		}
		w.warm.mu.Unlock()
	}
	b.Fatal("no pre-started interpreter finished its preload in 5 minutes")
	return nil
}

// holds reads, for a waiting pre-started run, its python3's CPU time so far
// in ms and the memory charged to its run's memory cgroup in MiB: ok is
// false where it is not isolated with a memory cgroup.
func holds(r *warmRun) (cpuMS, memMiB float64, ok bool) {
	init := r.p.Pid()
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", init, init))
	py, err := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil {
		return 0, 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", py))
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+2:])
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", init))
	m := regexp.MustCompile(`(?m)^\d+:(memory)?:(/\S*sandbox-run-\S+)$`).FindStringSubmatch(string(cg))
	if m == nil {
		return 0, 0, false
	}
	file := filepath.Join("/sys/fs/cgroup", m[2], "memory.current")
	if m[1] == "memory" {
		file = filepath.Join("/sys/fs/cgroup/memory", m[2], "memory.usage_in_bytes")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, false
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return float64((u + s) * 10), float64(n) / (1 << 20), true
}

// timeExecute runs job on b and returns how long Execute took; the result
// must say want.
func timeExecute(tb testing.TB, b *Backend, job sbexec.Job, want string) time.Duration {
	tb.Helper()
	t0 := time.Now()
	res, err := b.Execute(context.Background(), job)
	d := time.Since(t0)
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, want) {
		tb.Fatalf("Execute: %v %+v", err, res)
	}
	return d
}
