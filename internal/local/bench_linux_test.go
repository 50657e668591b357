package local_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/local"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/wire"
)

// BenchmarkLocalAPI measures POST /v1/execute of print(1) against the local
// backend with its default settings, on a real 127.0.0.1 listener, with 1
// and 8 requests in flight. ns/op is wall time per request (the inverse of
// throughput); p50-ns and p90-ns are the latency one request sees.
func BenchmarkLocalAPI(b *testing.B) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		b.Skip("no /usr/bin/python3")
	}
	ctx, cancel := context.WithCancel(context.Background())
	backend, err := local.New(ctx, local.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	srv, err := server.New(server.Options{Backend: backend, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	addr, err := srv.Listen()
	if err != nil {
		b.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			b.Error(err)
		}
	}()
	cl, err := client.New("http://" + addr.String())
	if err != nil {
		b.Fatal(err)
	}
	req := wire.ExecuteRequest{Code: "print(1)"}

	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrency-%d", conc), func(b *testing.B) {
			latencies := make([]time.Duration, b.N)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range conc {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							return
						}
						start := time.Now()
						res, err := cl.Execute(context.Background(), req)
						latencies[i] = time.Since(start)
						if err != nil || res.Stdout != "1\n" {
							b.Errorf("execute: %+v %v", res, err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(latencies[len(latencies)*9/10].Nanoseconds()), "p90-ns")
		})
	}
}

// BenchmarkServeIsolationCost measures what the sandbox costs a request:
// the real binary, `sandbox serve --backend local`, started twice, once with
// its default isolation (as root: every run an exec.Sandbox, whose init is
// this binary again with all its package initialisation) and once with
// --isolation none, and POST /v1/execute of print(1) sent to each in turn,
// one request in flight, so that both see the same machine load. It reports
// the medians and p90s of each and the median of the differences of
// neighbouring pairs.
func BenchmarkServeIsolationCost(b *testing.B) {
	if testing.Short() {
		b.Skip("builds the binary")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		b.Skip("no /usr/bin/python3")
	}
	bin := filepath.Join(b.TempDir(), "sandbox")
	build := osexec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/sandboxd/sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, msg)
	}
	sandboxed := startServe(b, bin)
	plain := startServe(b, bin, "--isolation", local.IsolationNone)
	req := wire.ExecuteRequest{Code: "print(1)"}
	one := func(cl *client.Client) time.Duration {
		start := time.Now()
		res, err := cl.Execute(context.Background(), req)
		d := time.Since(start)
		if err != nil || res.Stdout != "1\n" {
			b.Fatalf("execute: %+v %v", res, err)
		}
		return d
	}
	var ts, tp, diff []time.Duration
	for b.Loop() {
		s, p := one(sandboxed), one(plain)
		ts, tp, diff = append(ts, s), append(tp, p), append(diff, s-p)
	}
	q := func(d []time.Duration, n, of int) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)*n/of].Nanoseconds())
	}
	b.ReportMetric(q(ts, 1, 2), "sandboxed-p50-ns")
	b.ReportMetric(q(ts, 9, 10), "sandboxed-p90-ns")
	b.ReportMetric(q(tp, 1, 2), "none-p50-ns")
	b.ReportMetric(q(tp, 9, 10), "none-p90-ns")
	b.ReportMetric(q(diff, 1, 2), "cost-p50-ns")
}

// startServe starts bin's serve mode with the local backend on a free port
// and returns a client of it once it is ready.
func startServe(b *testing.B, bin string, extra ...string) *client.Client {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := osexec.Command(bin, append([]string{"serve", "--backend", "local", "--listen", addr, "--log-level", "error"}, extra...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	url := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("serve %v did not become ready: %v", extra, err)
		}
	}
	cl, err := client.New(url)
	if err != nil {
		b.Fatal(err)
	}
	return cl
}
