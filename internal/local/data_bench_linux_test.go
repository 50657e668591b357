package local

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sbexec "github.com/sandboxd/sandbox/internal/exec"
)

// floorScript is make bench-kind's floor (e2e/bench's client "imported"
// mode) as a server: it imports the data stack, says so, then for each
// line on stdin runs the snippet in fresh globals in this python3, its
// imports done, and answers the milliseconds that took; the figure is
// closed after the timing, as there.
const floorScript = `import contextlib, io, os, sys, tempfile, time
os.chdir(tempfile.mkdtemp())
import numpy, pandas, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
code = compile(sys.argv[1], "<snippet>", "exec")
print("ready", flush=True)
for _ in sys.stdin:
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"__name__": "__main__"})
    ms = (time.perf_counter() - t0) * 1000
    matplotlib.pyplot.close("all")
    print(ms, flush=True)
`

// floor is a running floorScript.
type floor struct {
	cmd *osexec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startFloor(b *testing.B, python string) *floor {
	b.Helper()
	cmd := osexec.Command(python, "-I", "-c", floorScript, sbexec.DataSnippet)
	tmp := b.TempDir()
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + tmp, "TMPDIR=" + tmp, "MPLCONFIGDIR=" + filepath.Join(tmp, "matplotlib")}
	cmd.Stderr = &floorStderr{b}
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	f := &floor{cmd: cmd, in: in, out: bufio.NewScanner(stdout)}
	if !f.out.Scan() || f.out.Text() != "ready" {
		b.Fatalf("floor python3 did not start: %v", f.out.Err())
	}
	return f
}

// floorStderr logs what the floor's python3 says on stderr.
type floorStderr struct{ b *testing.B }

func (w *floorStderr) Write(p []byte) (int, error) {
	w.b.Logf("floor python3: %s", p)
	return len(p), nil
}

// once runs the snippet once more and returns how long it took.
func (f *floor) once(b *testing.B) time.Duration {
	b.Helper()
	if _, err := io.WriteString(f.in, "\n"); err != nil {
		b.Fatal(err)
	}
	if !f.out.Scan() {
		b.Fatalf("floor python3: %v", f.out.Err())
	}
	ms, err := strconv.ParseFloat(f.out.Text(), 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func (f *floor) close() {
	f.in.Close()
	f.cmd.Wait()
}

// timedSnippet runs a snippet (%s, a Python string) in fresh globals and
// prints how long its exec() took in milliseconds, as floorScript times it.
const timedSnippet = `import time as _t
_t0 = _t.perf_counter()
exec(compile(%s, "<snippet>", "exec"), {"__name__": "__main__"})
print((_t.perf_counter() - _t0) * 1000)
`

// floorRuns is how many times a floor python3 runs the snippet after its
// first; the floor is their median.
const floorRuns = 5

// BenchmarkDataFloor sets side by side, in turns, make bench-kind's data
// snippet on the local backend (this host's default isolation) with the
// preload and its warm-up, with the preload alone, and its floor: a
// python3 whose imports are done running it again (floorScript; the
// median of floorRuns after its first). It also times that first run,
// which pays the first use of what it imported, and reports for the warm
// runs the snippet's exec() (as the floor times it) and their duration_ms
// (python3 given the job to its end) apart from Execute's whole. Each warm job is given once a pre-started interpreter
// has done its preload (and warm-up), as an agent's next call finds one.
func BenchmarkDataFloor(b *testing.B) {
	const python = "/usr/bin/python3"
	if osexec.Command(python, "-I", "-c", "import numpy, pandas, matplotlib").Run() != nil {
		b.Skip("no numpy, pandas and matplotlib for /usr/bin/python3 (Debian: python3-pandas python3-matplotlib)")
	}
	preload, _ := sbexec.ParsePreload(sbexec.DefaultPreload)
	log := slog.New(slog.DiscardHandler)
	backends := map[string]*Backend{}
	for _, name := range []string{"warmup", "preload"} {
		be, err := New(context.Background(), Options{Python: python, Preload: preload, Logger: log, NoWarmUp: name == "preload"})
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		backends[name] = be
	}
	b.Logf("sandboxed %v", backends["warmup"].Sandboxed())
	// The job times its exec() of the snippet as the floor does: its
	// figures are then comparable with the floor's whole.
	job := sbexec.Job{Code: fmt.Sprintf(timedSnippet, strconv.Quote(sbexec.DataSnippet)), Timeout: 60 * time.Second}
	times := map[string][]time.Duration{}
	var cpu, mem = map[string][]float64{}, map[string][]float64{}
	for b.Loop() {
		for _, name := range []string{"warmup", "preload"} {
			be := backends[name]
			r := waitPreloaded(b, be)
			if c, m, ok := holds(r); ok {
				cpu[name], mem[name] = append(cpu[name], c), append(mem[name], m)
			}
			t0 := time.Now()
			res, err := be.Execute(context.Background(), job)
			d := time.Since(t0)
			if err != nil || res.ExitCode != 0 || res.Stderr != "" {
				b.Fatalf("Execute: %v %+v", err, res)
			}
			ms, err := strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
			if err != nil {
				b.Fatalf("the job's exec() time: %v", err)
			}
			times[name] = append(times[name], d)
			times[name+"-exec"] = append(times[name+"-exec"], time.Duration(ms*float64(time.Millisecond)))
			times[name+"-run"] = append(times[name+"-run"], time.Duration(res.DurationMS)*time.Millisecond)
		}
		// A floor python3 of its own each turn: the end of every local run
		// kills this process's children that are not runs.
		fl := startFloor(b, python)
		times["floor-first"] = append(times["floor-first"], fl.once(b))
		var again []time.Duration
		for range floorRuns {
			again = append(again, fl.once(b))
		}
		fl.close()
		slices.Sort(again)
		times["floor"] = append(times["floor"], again[len(again)/2])
	}
	var report []string
	for _, name := range []string{"warmup", "warmup-run", "warmup-exec", "preload", "preload-run", "preload-exec", "floor", "floor-first"} {
		d := times[name]
		slices.Sort(d)
		p50 := float64(d[len(d)/2].Microseconds()) / 1000
		b.ReportMetric(p50, name+"-p50-ms")
		report = append(report, fmt.Sprintf("%s p50 %.1f ms p90 %.1f ms", name, p50, float64(d[len(d)*9/10].Microseconds())/1000))
	}
	for name := range cpu {
		slices.Sort(cpu[name])
		slices.Sort(mem[name])
		b.ReportMetric(cpu[name][len(cpu[name])/2], name+"-waiting-cpu-ms")
		b.ReportMetric(mem[name][len(mem[name])/2], name+"-waiting-cgroup-MiB")
	}
	b.Log(strings.Join(report, "; "))
}
