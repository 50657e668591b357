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
// bare `python3 -c 'print(1)'` on the same interpreter. The sub-benchmarks
// give each one's ns/op; "interleaved" alternates the two so that both see
// the same machine load, and reports the medians and their difference (the
// target: the runner adds at most 5 ms at the median).
func BenchmarkRunOverhead(b *testing.B) {
	if testing.Short() {
		b.Skip("builds the binary")
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "sandbox")
	build := osexec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/sandboxd/sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
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
	b.Run("interleaved", func(b *testing.B) {
		var tp, tr []time.Duration
		for b.Loop() {
			t0 := time.Now()
			bare()
			t1 := time.Now()
			runner()
			tp = append(tp, t1.Sub(t0))
			tr = append(tr, time.Since(t1))
		}
		mp, mr := median(tp), median(tr)
		b.ReportMetric(float64(mp.Nanoseconds()), "python-median-ns")
		b.ReportMetric(float64(mr.Nanoseconds()), "runner-median-ns")
		b.ReportMetric(float64((mr - mp).Nanoseconds()), "overhead-median-ns")
	})
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
