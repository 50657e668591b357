package runner

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/exec"
)

// start runs a Server on 127.0.0.1:0 and returns its base URL and the
// channel Run's error arrives on.
func start(t *testing.T) (string, <-chan error) {
	t.Helper()
	s, err := New(Options{Listen: "127.0.0.1:0", SandboxID: "pod-1", MaxTimeout: 30 * time.Second,
		Exec: exec.Options{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.Run(t.Context()) }()
	return "http://" + s.Addr().String(), ran
}

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOneJobThenExit(t *testing.T) {
	url, ran := start(t)
	if code, _ := do(t, "GET", url+"/healthz", ""); code != 200 {
		t.Errorf("healthz = %d", code)
	}
	if code, _ := do(t, "GET", url+"/readyz", ""); code != 200 {
		t.Errorf("readyz before the job = %d, want 200", code)
	}
	// A bad request runs nothing and leaves the runner ready.
	if code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(1)", "bogus": 1}`); code != 400 || !strings.Contains(body, "bogus") {
		t.Errorf("unknown field: %d %s", code, body)
	}
	if code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(1)", "timeout_s": 45}`); code != 400 || !strings.Contains(body, "limit") {
		t.Errorf("timeout over the runner's limit: %d %s", code, body)
	}
	if code, body := do(t, "GET", url+"/v1/execute", ""); code != 405 || !json.Valid([]byte(body)) {
		t.Errorf("GET /v1/execute: %d %s", code, body)
	}

	code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(6*7)", "timeout_s": 5, "files": [{"path": "a.txt", "content": "aGk=", "encoding": "base64"}]}`)
	var res exec.Result
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil {
		t.Fatalf("execute: %d %s (%v)", code, body, err)
	}
	if res.Stdout != "42\n" || res.ExitCode != 0 || res.SandboxID != "pod-1" {
		t.Errorf("result = %+v", res)
	}

	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run = %v, want nil after the job", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not exit after its job")
	}
}

func TestSecondJobConflicts(t *testing.T) {
	url, ran := start(t)
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(url+"/v1/execute", "application/json", strings.NewReader(`{"code": "import time; time.sleep(1)"}`))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	// Wait until the first job is taken.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := do(t, "GET", url+"/readyz", "")
		if code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner never took the first job (readyz %d)", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(2)"}`)
	var eb api.ErrorBody
	if code != 409 || json.Unmarshal([]byte(body), &eb) != nil || eb.Error == "" {
		t.Errorf("second job: %d %s, want 409 with an error", code, body)
	}
	if code := <-first; code != 200 {
		t.Errorf("first job = %d", code)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestStopsWithContext(t *testing.T) {
	s, err := New(Options{Listen: "127.0.0.1:0", Exec: exec.Options{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Run(ctx); err == nil {
		t.Error("Run = nil after ctx ended without a job, want an error")
	}
}
