package local_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/local"
	"github.com/sandboxd/sandbox/server"
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
	req := api.ExecuteRequest{Code: "print(1)"}

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
