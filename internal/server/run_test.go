package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// startServer runs s on a real 127.0.0.1 port and returns its base URL and
// a function that stops it and returns Run's error.
func startServer(t *testing.T, s *Server) (string, func() error) {
	t.Helper()
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	stopped := false
	stop := func() error {
		cancel()
		stopped = true
		return <-ran
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	return "http://" + addr.String(), stop
}

func TestRunRealListener(t *testing.T) {
	fb := &fakeBackend{result: wire.Result{SandboxID: "sb-1", Process: wire.Process{Stdout: "1\n"}}, ready: true}
	s, err := New(Options{Backend: fb, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	url, stop := startServer(t, s)

	resp, err := http.Post(url+"/v1/execute", "application/json", strings.NewReader(`{"code":"print(1)"}`))
	if err != nil {
		t.Fatal(err)
	}
	var res wire.Result
	err = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || res.Stdout != "1\n" {
		t.Fatalf("POST /v1/execute = %d %+v %v", resp.StatusCode, res, err)
	}
	resp, err = http.Get(url + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /readyz = %v %v", resp, err)
	}
	resp.Body.Close()

	if err := stop(); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("the server still accepts connections after shutdown")
	}
}

func TestRunBindError(t *testing.T) {
	s1, _ := New(Options{Backend: &fakeBackend{}, Listen: "127.0.0.1:0"})
	addr, err := s1.Listen()
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := New(Options{Backend: &fakeBackend{}, Listen: addr.String()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s2.Run(ctx); err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Errorf("Run on a taken port = %v, want a listen error", err)
	}
	s1.ln.Close()
}

// TestShutdownLetsRunsFinish: a run in flight when the context ends still
// gets its answer.
func TestShutdownLetsRunsFinish(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	fb := &fakeBackend{run: func(ctx context.Context, job exec.Job) (wire.Result, error) {
		close(started)
		select {
		case <-release:
			return wire.Result{Process: wire.Process{Stdout: "finished"}}, nil
		case <-ctx.Done():
			return wire.Result{}, ctx.Err()
		}
	}}
	s, _ := New(Options{Backend: fb, Listen: "127.0.0.1:0"})
	url, stop := startServer(t, s)

	answered := make(chan string, 1)
	go func() {
		resp, err := http.Post(url+"/v1/execute", "application/json", strings.NewReader(`{"code":"x"}`))
		if err != nil {
			answered <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- string(b)
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Shutdown closes the listener first; then the run may finish.
	waitRefused(t, url)
	close(release)
	if got := <-answered; !strings.Contains(got, "finished") {
		t.Errorf("in-flight run answered %q, want its result", got)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// TestShutdownTimeoutCancelsRuns: a run still going when the shutdown wait
// ends is cancelled, and Run says so.
func TestShutdownTimeoutCancelsRuns(t *testing.T) {
	started := make(chan struct{})
	fb := &fakeBackend{run: func(ctx context.Context, job exec.Job) (wire.Result, error) {
		close(started)
		<-ctx.Done()
		return wire.Result{}, ctx.Err()
	}}
	s, _ := New(Options{Backend: fb, Listen: "127.0.0.1:0", ShutdownTimeout: 200 * time.Millisecond})
	url, stop := startServer(t, s)
	go func() {
		resp, err := http.Post(url+"/v1/execute", "application/json", strings.NewReader(`{"code":"x"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	begin := time.Now()
	err := stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want the shutdown deadline", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("shutdown took %v with a 200ms wait", d)
	}
}

func waitRefused(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(url + "/healthz")
		if err != nil {
			return
		}
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the listener is still open")
}
