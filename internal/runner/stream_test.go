//go:build linux

package runner

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/runnerclient"
	"github.com/sandboxd/sandbox/wire"
)

// TestStreamedJob: asked for events, the runner sends the job's output as
// it comes, as serve's client of it (runnerclient.PostStream) reads it:
// the first line a second before the result, which is the unstreamed
// result, and the runner's timing after the events, as a trailer.
func TestStreamedJob(t *testing.T) {
	url, ran := start(t)
	addr := strings.TrimPrefix(url, "http://")
	var (
		first time.Time
		out   strings.Builder
	)
	var res wire.Result
	body := []byte(`{"code":"import time\nprint('one', flush=True)\ntime.sleep(1)\nprint('two')","timeout_s":10}`)
	h, err := runnerclient.PostStream(t.Context(), http.DefaultClient, addr, "/v1/execute", "pod p", body, 1<<20, &res,
		func(stream, text string) {
			if first.IsZero() {
				first = time.Now()
			}
			if stream == wire.EventStdout {
				out.WriteString(text)
			}
		})
	ended := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if first.IsZero() || ended.Sub(first) < 800*time.Millisecond {
		t.Errorf("first output %s before the result, want about a second", ended.Sub(first))
	}
	if res.Stdout != "one\ntwo\n" || out.String() != res.Stdout || res.SandboxID != "pod-1" {
		t.Errorf("result %+v, streamed %q", res, out.String())
	}
	if _, ok := api.ParseServerTiming(h.Get(api.ServerTiming))[api.TimingRunnerJob]; !ok {
		t.Errorf("Server-Timing %q: no %s", h.Get(api.ServerTiming), api.TimingRunnerJob)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run = %v after the job", err)
	}
}

// TestStreamedJobCancelled: serve giving up on the stream (its client went
// away) ends the run: the snippet's processes are killed, and the runner,
// its one job spent, exits.
func TestStreamedJobCancelled(t *testing.T) {
	url, ran := start(t)
	addr := strings.TrimPrefix(url, "http://")
	marker := "runner-stream-test-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	body := []byte(`{"code":"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '` +
		marker + `'])\nprint('started', flush=True)\ntime.sleep(300)","timeout_s":30}`)
	ctx, cancel := context.WithCancel(t.Context())
	var res wire.Result
	_, err := runnerclient.PostStream(ctx, http.DefaultClient, addr, "/v1/execute", "pod p", body, 1<<20, &res,
		func(_, text string) {
			if strings.HasPrefix(text, "started") {
				if len(withMarker(t, marker)) == 0 {
					t.Error("the snippet's child is not running: the test would prove nothing")
				}
				cancel()
			}
		})
	if err == nil {
		t.Fatal("PostStream after cancel = nil, want an error")
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not end within 10 s of its job's cancel")
	}
	if pids := withMarker(t, marker); len(pids) > 0 {
		t.Errorf("the run's processes %v outlived the cancel", pids)
	}
}

// withMarker lists the processes whose command line holds marker.
func withMarker(t *testing.T, marker string) []string {
	t.Helper()
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []string
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) && !strings.Contains(p, "/"+strconv.Itoa(os.Getpid())+"/") {
			pids = append(pids, strings.Split(p, "/")[2])
		}
	}
	return pids
}
