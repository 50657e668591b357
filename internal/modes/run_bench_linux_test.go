package modes_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkRunOverhead compares `sandbox run --code-file` of print(1), a
// whole new process, with bare `python3 -c 'print(1)'` on the same
// interpreter. The sub-benchmarks give each one's ns/op; "interleaved"
// alternates the two so that both see the same machine load, and reports
// their medians and the overhead over bare python.
func BenchmarkRunOverhead(b *testing.B) {
	if testing.Short() {
		b.Skip("builds the binary")
	}
	dir := b.TempDir()
	bin := buildBinary(b, dir, "sandbox", "github.com/sandboxd/sandbox")
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
			tp = append(tp, timed(bare))
			tr = append(tr, timed(runner))
		}
		mp, mr := median(tp), median(tr)
		b.ReportMetric(float64(mp.Nanoseconds()), "python-median-ns")
		b.ReportMetric(float64(mr.Nanoseconds()), "runner-median-ns")
		b.ReportMetric(float64((mr - mp).Nanoseconds()), "overhead-median-ns")
	})
}

// BenchmarkRunnerFirstJob is what a warm pod's job costs in the pod: each
// iteration starts `sandbox run` serving HTTP (as the pod does), waits until
// it is ready (its python3 started and waiting), and times one print(1) job
// over a new connection, whose answer is the runner's first and only. It
// alternates with bare python3, so that both see the same load, and reports
// the medians and their ratio.
func BenchmarkRunnerFirstJob(b *testing.B) {
	if testing.Short() {
		b.Skip("builds the binary")
	}
	dir := b.TempDir()
	bin := buildBinary(b, dir, "sandbox", "github.com/sandboxd/sandbox")
	python, err := osexec.LookPath("/usr/bin/python3")
	if err != nil {
		b.Skip("no python3 at /usr/bin/python3, the runner's")
	}
	body := []byte(`{"code": "print(1)"}`)
	var tp, tj []time.Duration
	for i := 0; b.Loop(); i++ {
		tp = append(tp, timed(func() { mustRun(b, python, "-c", "print(1)") }))
		tj = append(tj, firstJob(b, bin, filepath.Join(dir, strconv.Itoa(i)), body))
	}
	mp, mj := median(tp), median(tj)
	b.ReportMetric(float64(mp.Nanoseconds()), "python-median-ns")
	b.ReportMetric(float64(mj.Nanoseconds()), "job-median-ns")
	b.ReportMetric(float64((mj - mp).Nanoseconds()), "overhead-median-ns")
	b.ReportMetric(float64(mj)/float64(mp), "job/python")
}

// firstJob starts a runner with its own working directory, waits for it to
// be ready and returns how long its one job took, request to answer.
func firstJob(b *testing.B, bin, workdir string, body []byte) time.Duration {
	if err := os.Mkdir(workdir, 0o755); err != nil {
		b.Fatal(err)
	}
	addr := freeAddr(b)
	cmd := osexec.Command(bin, "run", "--listen", addr, "--workdir", workdir, "--sandbox-id", "bench")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// The runner exits by itself after its job; the kill only cuts its
	// shutdown short so that it does not overlap the next measurement.
	defer cmd.Wait()
	defer cmd.Process.Kill()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(start) > 10*time.Second {
			b.Fatalf("runner at %s not ready after 10s: %v", addr, err)
		}
	}
	t := time.Now()
	resp, err := client.Post("http://"+addr+"/v1/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t)
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"stdout":"1\n"`)) {
		b.Fatalf("job: %d %q %v", resp.StatusCode, out, err)
	}
	return d
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
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
