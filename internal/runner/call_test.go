//go:build linux

package runner

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// toolsDir is a working directory holding the sample tools package, as an
// agent image's WORKDIR would.
func toolsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("testdata/tools")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func call(t *testing.T, function, args, kwargs string, timeout time.Duration, env map[string]string) wire.CallResult {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"image": "agent:test", "function": function,
		"args": json.RawMessage(args), "kwargs": json.RawMessage(kwargs), "timeout_s": int(timeout / time.Second), "env": env})
	c, err := api.DecodeCall(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("DecodeCall: %v", err)
	}
	environ := ToolEnv(append(exec.DefaultEnv(t.TempDir()), "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_PORT=tcp://10.96.0.1:443", "IMAGE_VAR=kept"))
	res, err := RunCall(t.Context(), c, exec.Options{Dir: toolsDir(t)}, environ)
	if err != nil {
		t.Fatalf("RunCall(%s): %v", function, err)
	}
	return res
}

func TestCallReturnsValue(t *testing.T) {
	res := call(t, "tools.sample:add", `[2]`, `{"b": 3}`, 10*time.Second, nil)
	if res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("add: %+v", res)
	}
	var v struct {
		Sum   int
		Where string
	}
	if err := json.Unmarshal(res.Result, &v); err != nil || v.Sum != 5 || v.Where != toolsDir(t) {
		t.Errorf("result %s (%v): want sum 5 in the image's working directory", res.Result, err)
	}
	if res.Stdout != "adding 2 3\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
}

func TestCallKinds(t *testing.T) {
	for _, tt := range []struct {
		name, function, args string
		kind, typ, message   string
	}{
		{"raises", "tools.sample:boom", `["no weather"]`, wire.CallRaised, "ValueError", "no weather"},
		{"not JSON", "tools.sample:unserializable", `[]`, wire.CallUnserializable, "NotJSONSerializable", "set"},
		{"NaN", "tools.sample:nan", `[]`, wire.CallUnserializable, "NotJSONSerializable", "float"},
		{"no module", "tools.missing:f", `[]`, wire.CallImport, "ModuleNotFoundError", "tools.missing"},
		{"no attribute", "tools.sample:nope", `[]`, wire.CallImport, "AttributeError", "nope"},
		{"not callable", "tools.sample:not_callable", `[]`, wire.CallImport, "TypeError", "not a function"},
		{"os._exit", "tools.sample:hard_exit", `[]`, wire.CallNoResult, "NoResult", "without reporting"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, tt.function, tt.args, `{}`, 10*time.Second, nil)
			if res.Error == nil || res.Error.Kind != tt.kind || res.Error.Type != tt.typ || !strings.Contains(res.Error.Message, tt.message) {
				t.Fatalf("error %+v, want kind %s type %s message with %q", res.Error, tt.kind, tt.typ, tt.message)
			}
			if string(res.Result) != "null" {
				t.Errorf("result %s beside an error", res.Result)
			}
		})
	}
	res := call(t, "tools.sample:boom", `["x"]`, `{}`, 10*time.Second, nil)
	if !strings.Contains(res.Error.Traceback, `sample.py", line`) || !strings.Contains(res.Error.Traceback, "raise ValueError(msg)") ||
		strings.Contains(res.Error.Traceback, "_sandbox_call") {
		t.Errorf("traceback should start at the tool's frame:\n%s", res.Error.Traceback)
	}
}

func TestCallPrintsNeverCorruptTheValue(t *testing.T) {
	res := call(t, "tools.sample:noisy", `[3000000]`, `{}`, 20*time.Second, nil)
	if res.Error != nil || string(res.Result) != `"quiet value"` {
		t.Fatalf("noisy: result %s error %+v", res.Result, res.Error)
	}
	if !res.StdoutTruncated || len(res.Stdout) > exec.DefaultMaxOutput+200 || !strings.Contains(res.Stdout, "forged") {
		t.Errorf("stdout %d bytes, truncated=%v: want the flood cut to the cap, its tail kept", len(res.Stdout), res.StdoutTruncated)
	}
	if res.Stderr != "to stderr\n" {
		t.Errorf("stderr %q", res.Stderr)
	}
}

func TestCallAttributePathsAndDecorated(t *testing.T) {
	if res := call(t, "tools.sample:Calc.mul", `[6, 7]`, `{}`, 10*time.Second, nil); string(res.Result) != "42" {
		t.Errorf("Calc.mul: %s %+v", res.Result, res.Error)
	}
	if res := call(t, "tools.sample:decorated", `["Oslo"]`, `{}`, 10*time.Second, nil); string(res.Result) != `"sunny in Oslo"` {
		t.Errorf("decorated tool: %s %+v: the pod must call __wrapped__", res.Result, res.Error)
	}
	if res := call(t, "tools.sample:later", `[21]`, `{}`, 10*time.Second, nil); string(res.Result) != "42" {
		t.Errorf("coroutine: %s %+v", res.Result, res.Error)
	}
	start := time.Now()
	if res := call(t, "tools.sample:leave_thread", `[]`, `{}`, 10*time.Second, nil); string(res.Result) != `"done"` || res.TimedOut {
		t.Errorf("leftover thread: %s %+v", res.Result, res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a leftover thread held the call for %s", d)
	}
}

func TestCallEnvironment(t *testing.T) {
	res := call(t, "tools.sample:environ", `[]`, `{}`, 10*time.Second, map[string]string{"UNITS": "metric", "PATH": "/usr/bin:/bin"})
	var env map[string]string
	if err := json.Unmarshal(res.Result, &env); err != nil {
		t.Fatalf("environ: %s %v", res.Result, err)
	}
	if env["UNITS"] != "metric" || env["IMAGE_VAR"] != "kept" || env["PATH"] != "/usr/bin:/bin" {
		t.Errorf("env %v: want the image's variables and the request's over them", env)
	}
	for k := range env {
		if strings.HasPrefix(k, "KUBERNETES_") {
			t.Errorf("env has %s", k)
		}
	}
}

func TestCallTimeoutKillsTree(t *testing.T) {
	beat := filepath.Join(t.TempDir(), "beat")
	res := call(t, "tools.sample:sleeper", `[`+string(mustJSON(beat))+`]`, `{}`, 2*time.Second, nil)
	if !res.TimedOut || res.ExitCode != -1 || res.Error != nil || string(res.Result) != "null" {
		t.Fatalf("sleeper: %+v", res)
	}
	before, _ := os.ReadFile(beat)
	time.Sleep(500 * time.Millisecond)
	after, _ := os.ReadFile(beat)
	if len(before) == 0 || len(after) != len(before) {
		t.Errorf("the setsid grandchild beat %d times before and %d after the answer: want it started, then dead", len(before), len(after))
	}
}

func TestToolEnvSetsHome(t *testing.T) {
	env := ToolEnv([]string{"PATH=/bin", "KUBERNETES_SERVICE_PORT=443"})
	if strings.Join(env, " ") != "PATH=/bin HOME=/tmp" {
		t.Errorf("ToolEnv = %v", env)
	}
	if env := ToolEnv([]string{"HOME=/home/agent"}); strings.Join(env, " ") != "HOME=/home/agent" {
		t.Errorf("ToolEnv kept no image HOME: %v", env)
	}
	// What the runtime sets where the image has no HOME, and the runner's
	// own variable from the downward API.
	if env := ToolEnv([]string{"HOME=/", "SANDBOX_NODE_IP=172.18.0.2", "PATH=/bin"}); strings.Join(env, " ") != "PATH=/bin HOME=/tmp" {
		t.Errorf("ToolEnv with the runtime's HOME=/: %v", env)
	}
}

func TestCallServer(t *testing.T) {
	s, err := New(Options{Listen: "127.0.0.1:0", SandboxID: "tool-1", MaxTimeout: 120 * time.Second,
		Exec: exec.Options{Dir: toolsDir(t)}, Call: true, CallEnv: exec.DefaultEnv(t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.Run(t.Context()) }()
	url := "http://" + s.Addr().String()
	if code, _ := do(t, "POST", url+"/v1/execute", `{"code":"print(1)"}`); code != 404 {
		t.Errorf("a tool pod's runner took a snippet: %d", code)
	}
	if code, body := do(t, "POST", url+"/v1/call", `{"image":"a","function":"bad"}`); code != 400 || !strings.Contains(body, "function") {
		t.Errorf("bad call: %d %s", code, body)
	}
	code, body := do(t, "POST", url+"/v1/call", `{"image":"a","function":"tools.sample:add","args":[1,2]}`)
	var res wire.CallResult
	if code != 200 || json.Unmarshal([]byte(body), &res) != nil || res.SandboxID != "tool-1" || !strings.Contains(string(res.Result), `"sum":3`) {
		t.Fatalf("call: %d %s", code, body)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not exit after its one call")
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestCallServerTakesWhatServeForwards: a caller's body within serve's
// limit can grow when serve encodes it again (U+2028 in env values becomes
// \u2028, twice the bytes); the runner takes it, since the limit applies
// once, to what the caller sent. Under the caller's limit the same body
// would be refused (the control).
func TestCallServerTakesWhatServeForwards(t *testing.T) {
	// Written by hand (encoding/json would escape U+2028 itself): env values
	// near their 64 KiB bound, and an argument that fills the body to
	// exactly the caller's limit (add joins two strings too).
	head := `{"image":"a","function":"tools.sample:add","env":{"BIG":"` + strings.Repeat("\u2028", 21000) + `"},"args":["`
	tail := `",""]}`
	sent := []byte(head + strings.Repeat("x", api.DefaultMaxBody-len(head)-len(tail)) + tail)
	c, err := api.DecodeCall(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(sent)), api.DefaultMaxBody))
	if err != nil {
		t.Fatalf("serve refused the caller's %d bytes: %v", len(sent), err)
	}
	fwd, err := wire.Marshal(api.CallWire(c))
	if err != nil {
		t.Fatal(err)
	}
	if len(fwd) <= api.DefaultMaxBody {
		t.Fatalf("forwarded %d bytes: the body must outgrow the caller's limit for this test to mean anything", len(fwd))
	}
	for _, tc := range []struct {
		max  int64
		want int
	}{{api.DefaultMaxBody, http.StatusRequestEntityTooLarge}, {0, http.StatusOK}} {
		s, err := New(Options{Listen: "127.0.0.1:0", SandboxID: "tool-1", MaxTimeout: 120 * time.Second, MaxBody: tc.max,
			Exec: exec.Options{Dir: toolsDir(t)}, Call: true, CallEnv: exec.DefaultEnv(t.TempDir())})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.Run(t.Context()) }()
		if code, body := do(t, "POST", "http://"+s.Addr().String()+"/v1/call", string(fwd)); code != tc.want {
			t.Errorf("runner limit %d, %d bytes forwarded: %d %s, want %d", tc.max, len(fwd), code, clip(body), tc.want)
		}
	}
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
