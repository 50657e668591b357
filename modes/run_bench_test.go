package modes_test

import (
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkRunOverhead compares `sandbox run --code-file` of print(1) with
// bare `python3 -c 'print(1)'` on the same interpreter (the target: the
// runner adds at most 5 ms at the median), and with the same command line of
// runneronly, a binary that links nothing but the runner: the floor of any
// runner process on this machine. The sub-benchmarks give each one's ns/op;
// "interleaved" alternates the three so that all see the same machine load,
// and reports their medians and the overheads over bare python.
func BenchmarkRunOverhead(b *testing.B) {
	if testing.Short() {
		b.Skip("builds the binary")
	}
	dir := b.TempDir()
	bin := buildBinary(b, dir, "sandbox", "github.com/sandboxd/sandbox")
	floor := buildBinary(b, dir, "runneronly", "./oneshot/testdata/runneronly")
	codeFile := filepath.Join(dir, "print1.py")
	if err := os.WriteFile(codeFile, []byte("print(1)\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	// The runner resolves python3 in the child's default PATH; use the same
	// one bare, not whatever shim the benchmark's PATH holds.
	python, err := osexec.LookPath("/usr/bin/python3")
	if err != nil {
		python, err = osexec.LookPath("python3")
		if err != nil {
			b.Skip("no python3")
		}
	}
	bare := func() { mustRun(b, python, "-c", "print(1)") }
	runner := func() { mustRun(b, bin, "run", "--code-file", codeFile) }
	runnerOnly := func() { mustRun(b, floor, "run", "--code-file", codeFile) }

	b.Run("python", func(b *testing.B) {
		for b.Loop() {
			bare()
		}
	})
	b.Run("runner", func(b *testing.B) {
		for b.Loop() {
			runner()
		}
	})
	b.Run("runneronly", func(b *testing.B) {
		for b.Loop() {
			runnerOnly()
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		var tp, tr, to []time.Duration
		for b.Loop() {
			tp = append(tp, timed(bare))
			tr = append(tr, timed(runner))
			to = append(to, timed(runnerOnly))
		}
		mp, mr, mo := median(tp), median(tr), median(to)
		b.ReportMetric(float64(mp.Nanoseconds()), "python-median-ns")
		b.ReportMetric(float64(mr.Nanoseconds()), "runner-median-ns")
		b.ReportMetric(float64((mr - mp).Nanoseconds()), "overhead-median-ns")
		b.ReportMetric(float64((mo - mp).Nanoseconds()), "runneronly-overhead-median-ns")
	})
}

// buildBinary builds pkg as dir/name, stripped as the Makefile builds it.
func buildBinary(b *testing.B, dir, name, pkg string) string {
	out := filepath.Join(dir, name)
	build := osexec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

func timed(f func()) time.Duration {
	t := time.Now()
	f()
	return time.Since(t)
}

func mustRun(b *testing.B, name string, args ...string) {
	out, err := osexec.Command(name, args...).Output()
	if err != nil || len(out) == 0 {
		b.Fatalf("%s %v: %v (%q)", name, args, err, out)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
