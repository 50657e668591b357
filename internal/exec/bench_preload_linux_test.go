package exec

import (
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// dataSnippet is what a data agent sends most: a frame, its describe() and
// a chart saved as PNG.
const dataSnippet = `import numpy as np, pandas as pd, matplotlib.pyplot as plt
df = pd.DataFrame({"x": np.arange(100), "y": np.random.default_rng(0).normal(size=100)})
print(df.describe())
df.plot(x="x", y="y")
plt.savefig("plot.png")
`

// BenchmarkPreload sets side by side, interleaved, the data snippet and
// print(1), each given to a pre-started interpreter without a preload and
// to one that has imported DefaultPreload (its job given once the preload
// is done), and reports the medians from the job to its result, and for
// print(1) from its output to its result: the interpreter's exit, where a
// preloaded one frees the memory of its modules. It also
// reports what the preload costs each interpreter: CPU time and resident
// memory beyond those of one without it, both waiting.
func BenchmarkPreload(b *testing.B) {
	python, err := findPython("", nil)
	if err != nil {
		b.Skip(err)
	}
	if osexec.Command(python, "-I", "-c", "import numpy, pandas, matplotlib").Run() != nil {
		b.Skip("no numpy, pandas and matplotlib here")
	}
	preload, _ := ParsePreload(DefaultPreload)
	home := b.TempDir()
	env := append(DefaultEnv(home), "MPLBACKEND=Agg", "MPLCONFIGDIR="+filepath.Join(home, "matplotlib"))
	// The image builds matplotlib's font list; so does this, once.
	build := osexec.Command(python, "-I", "-c", "import matplotlib.pyplot")
	build.Env = env
	if err := build.Run(); err != nil {
		b.Fatal(err)
	}
	data := Job{Code: dataSnippet, Timeout: 60 * time.Second}
	print1 := Job{Code: "print(1)", Timeout: 10 * time.Second}
	var dataPlain, dataPre, printPlain, printPre, exitPlain, exitPre, cpu, rss []time.Duration
	for b.Loop() {
		plain, pre := warmPair(b, env, preload)
		cpu = append(cpu, cpuTime(b, pre.Pid())-cpuTime(b, plain.Pid()))
		rss = append(rss, time.Duration(rssKiB(b, pre.Pid())-rssKiB(b, plain.Pid())))
		dataPlain = append(dataPlain, timeJob(b, plain, data, "count"))
		dataPre = append(dataPre, timeJob(b, pre, data, "count"))
		plain, pre = warmPair(b, env, preload)
		d, exit := timeJobExit(b, plain, print1, "1")
		printPlain, exitPlain = append(printPlain, d), append(exitPlain, exit)
		d, exit = timeJobExit(b, pre, print1, "1")
		printPre, exitPre = append(printPre, d), append(exitPre, exit)
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"data-median-ns", dataPlain}, {"data-preloaded-median-ns", dataPre}, {"print1-median-ns", printPlain}, {"print1-preloaded-median-ns", printPre},
		{"print1-exit-median-ns", exitPlain}, {"print1-preloaded-exit-median-ns", exitPre}} {
		b.ReportMetric(float64(medianOf(m.d).Nanoseconds()), m.name)
	}
	b.ReportMetric(float64(medianOf(cpu).Milliseconds()), "preload-cpu-ms")
	b.ReportMetric(float64(medianOf(rss))/1024, "preload-rss-MiB")
}

// warmPair pre-starts an interpreter without a preload and one with it,
// and returns them once both wait, the preload done.
func warmPair(b *testing.B, env, preload []string) (plain, pre *Interp) {
	b.Helper()
	var err error
	if plain, err = Prestart(Options{Dir: b.TempDir(), Env: env}); err != nil {
		b.Fatal(err)
	}
	if pre, err = Prestart(Options{Dir: b.TempDir(), Env: env, Preload: preload}); err != nil {
		b.Fatal(err)
	}
	<-plain.Ready()
	<-pre.Preloaded()
	if m := pre.Missing(); len(m) > 0 {
		b.Fatalf("preload missing %q", m)
	}
	return plain, pre
}

// timeJob gives job to p and returns how long it took to its result, which
// must say want.
func timeJob(b *testing.B, p *Interp, job Job, want string) time.Duration {
	b.Helper()
	defer p.Close()
	t0 := time.Now()
	res, err := p.Run(b.Context(), job)
	d := time.Since(t0)
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, want) {
		b.Fatalf("Run: %v %+v", err, res)
	}
	return d
}

// timeJobExit is timeJob that also returns the time from the job's first
// output to its result.
func timeJobExit(b *testing.B, p *Interp, job Job, want string) (total, exit time.Duration) {
	b.Helper()
	var mu sync.Mutex
	var out time.Time
	job.Output = func(_, _ string) {
		mu.Lock()
		if out.IsZero() {
			out = time.Now()
		}
		mu.Unlock()
	}
	total = timeJob(b, p, job, want)
	end := time.Now()
	mu.Lock()
	defer mu.Unlock()
	if out.IsZero() {
		b.Fatal("no output streamed")
	}
	return total, end.Sub(out)
}

// cpuTime is a process's user and system time so far (stat(5) fields 14
// and 15, in clock ticks of 10 ms).
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+2:])
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return time.Duration(u+s) * 10 * time.Millisecond
}

// rssKiB is a process's resident memory (VmRSS).
func rssKiB(b *testing.B, pid int) int64 {
	b.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
