package exec

import (
	"os"
	osexec "os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkRunPrint1 measures Run itself (no binary start-up) against bare
// python3 -c 'print(1)' on the same interpreter, interleaved, and reports the
// medians: the cost of the preamble, the pipes, the files and the sweep.
func BenchmarkRunPrint1(b *testing.B) {
	python, err := findPython("", nil)
	if err != nil {
		b.Skip(err)
	}
	dir := b.TempDir()
	var tp, tr []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if out, err := osexec.Command(python, "-c", "print(1)").Output(); err != nil || string(out) != "1\n" {
			b.Fatalf("python: %v %q", err, out)
		}
		t1 := time.Now()
		res, err := Run(b.Context(), Job{Code: "print(1)", Timeout: 10 * time.Second}, Options{Dir: dir})
		if err != nil || res.Stdout != "1\n" {
			b.Fatalf("Run: %v %+v", err, res)
		}
		tp = append(tp, t1.Sub(t0))
		tr = append(tr, time.Since(t1))
	}
	reportMedians(b, tp, tr, "run")
}

// BenchmarkPrestarted sets, side by side and interleaved, bare python3 -c
// 'print(1)', Run of print(1) (python3 started for the job) and the same job
// given to an interpreter pre-started before it: what a warm pod's job costs
// in the runner, from the job to its result. The next pre-started
// interpreter is started, and ready, before each measurement begins.
func BenchmarkPrestarted(b *testing.B) {
	python, err := findPython("", nil)
	if err != nil {
		b.Skip(err)
	}
	job := Job{Code: "print(1)", Timeout: 10 * time.Second}
	var tp, tf, tw []time.Duration
	for b.Loop() {
		p, err := Prestart(Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		<-p.Ready()

		t0 := time.Now()
		if out, err := osexec.Command(python, "-c", "print(1)").Output(); err != nil || string(out) != "1\n" {
			b.Fatalf("python: %v %q", err, out)
		}
		t1 := time.Now()
		if res, err := Run(b.Context(), job, Options{Dir: b.TempDir()}); err != nil || res.Stdout != "1\n" {
			b.Fatalf("Run: %v %+v", err, res)
		}
		t2 := time.Now()
		if res, err := p.Run(b.Context(), job); err != nil || res.Stdout != "1\n" {
			b.Fatalf("pre-started: %v %+v", err, res)
		}
		t3 := time.Now()
		p.Close()
		tp, tf, tw = append(tp, t1.Sub(t0)), append(tf, t2.Sub(t1)), append(tw, t3.Sub(t2))
	}
	mp, mf, mw := medianOf(tp), medianOf(tf), medianOf(tw)
	b.ReportMetric(float64(mp.Nanoseconds()), "python-median-ns")
	b.ReportMetric(float64(mf.Nanoseconds()), "fresh-median-ns")
	b.ReportMetric(float64(mw.Nanoseconds()), "prestarted-median-ns")
	b.ReportMetric(float64(mw)/float64(mp), "prestarted/python")
}

func medianOf(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkPreamble measures what setting the limits in Python costs: the
// child's exact command line against bare python3 -c 'print(1)', interleaved.
func BenchmarkPreamble(b *testing.B) {
	python, err := findPython("", nil)
	if err != nil {
		b.Skip(err)
	}
	snippet, err := writeSnippet("print(1)", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(snippet)
	args := pythonArgs(Options{}, snippet, -1)
	var tp, tr []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if out, err := osexec.Command(python, "-c", "print(1)").Output(); err != nil || string(out) != "1\n" {
			b.Fatalf("python: %v %q", err, out)
		}
		t1 := time.Now()
		if out, err := osexec.Command(python, args...).Output(); err != nil || string(out) != "1\n" {
			b.Fatalf("preamble: %v %q", err, out)
		}
		tp = append(tp, t1.Sub(t0))
		tr = append(tr, time.Since(t1))
	}
	reportMedians(b, tp, tr, "preamble")
}

// reportMedians reports the median of bare python's times, of the measured
// form's, and the difference: the overhead the benchmark is about.
func reportMedians(b *testing.B, python, measured []time.Duration, name string) {
	mp, mr := medianOf(python), medianOf(measured)
	b.ReportMetric(float64(mp.Nanoseconds()), "python-median-ns")
	b.ReportMetric(float64(mr.Nanoseconds()), name+"-median-ns")
	b.ReportMetric(float64((mr - mp).Nanoseconds()), "overhead-median-ns")
}
