package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

type fakeCaller struct {
	mu    sync.Mutex
	calls []api.Call
	res   wire.CallResult
	err   error
}

func (f *fakeCaller) Call(ctx context.Context, c api.Call) (wire.CallResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	return f.res, f.err
}

func newCallServer(t *testing.T, c Caller) (*Server, *syncBuffer) {
	t.Helper()
	var logs syncBuffer
	s, err := New(Options{Backend: &fakeBackend{ready: true}, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Caller: c, CallPolicy: api.CallPolicy{Images: []string{"agent:dev"}, EnvDeny: api.DefaultEnvDeny,
			ImagesSetting: "--tool-images", EnvDenySetting: "--tool-env-deny"}})
	if err != nil {
		t.Fatal(err)
	}
	return s, &logs
}

func TestCallOffWithoutCaller(t *testing.T) {
	s, _ := newTestServer(t, &fakeBackend{ready: true}, 0)
	rec := do(t, s.Handler(), "POST", "/v1/call", `{"image":"agent:dev","function":"m:f"}`)
	if rec.Code != http.StatusNotFound {
		t.Errorf("/v1/call without tool images: %d, want 404", rec.Code)
	}
}

func TestCallAnswers(t *testing.T) {
	fc := &fakeCaller{res: wire.CallResult{SandboxID: "sandbox-tool-x", Result: json.RawMessage(`{"a":"<b>"}`)}}
	s, logs := newCallServer(t, fc)
	rec := do(t, s.Handler(), "POST", "/v1/call", `{"image":"agent:dev","function":"tools.w:get","kwargs":{"secret_arg":"hunter2"},"env":{"UNITS":"metric"}}`)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"result":{"a":"<b>"}`) {
		t.Fatalf("call: %d %s", rec.Code, rec.Body)
	}
	if len(fc.calls) != 1 || fc.calls[0].Env["UNITS"] != "metric" {
		t.Errorf("caller got %+v", fc.calls)
	}
	log := logs.String()
	if !strings.Contains(log, `"function":"tools.w:get"`) || strings.Contains(log, "hunter2") || strings.Contains(log, "metric") {
		t.Errorf("log line: want the function, never arguments or env values: %s", log)
	}
}

func TestCallRefusals(t *testing.T) {
	fc := &fakeCaller{}
	s, _ := newCallServer(t, fc)
	big := `{"image":"agent:dev","function":"m:f","args":["` + strings.Repeat("x", 2<<20) + `"]}`
	for _, tt := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"outside the allow list", `{"image":"evil:1","function":"m:f"}`, 403, "--tool-images"},
		{"denied env", `{"image":"agent:dev","function":"m:f","env":{"API_TOKEN":"x"}}`, 400, "API_TOKEN"},
		{"bad function", `{"image":"agent:dev","function":"m.f"}`, 400, "function"},
		{"2 MiB argument", big, 413, "too large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, s.Handler(), "POST", "/v1/call", tt.body)
			if rec.Code != tt.status || !strings.Contains(errorOf(t, rec), tt.want) {
				t.Errorf("%d %s, want %d naming %q", rec.Code, rec.Body, tt.status, tt.want)
			}
		})
	}
	if len(fc.calls) != 0 {
		t.Errorf("refused calls reached the caller: %d", len(fc.calls))
	}
	fc.err = &api.Error{Status: http.StatusGatewayTimeout, Msg: "tool pod x was not Ready within 110s, waiting for: ImagePullBackOff"}
	rec := do(t, s.Handler(), "POST", "/v1/call", `{"image":"agent:dev","function":"m:f"}`)
	if rec.Code != 504 || !strings.Contains(errorOf(t, rec), "ImagePullBackOff") {
		t.Errorf("caller's 504: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, s.Handler(), "GET", "/v1/call", ""); rec.Code != 405 {
		t.Errorf("GET /v1/call: %d", rec.Code)
	}
}
