package api

import (
	"encoding/json"
	"errors"
	stdio "io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

func TestDecodeCallAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Call
	}{
		{"minimal gets the defaults", `{"image":"agent:1","function":"tools.weather:get"}`,
			Call{Image: "agent:1", Module: "tools.weather", Attr: "get", Args: json.RawMessage("[]"), Kwargs: json.RawMessage("{}"), Timeout: 30 * time.Second}},
		{"everything", `{"image":"reg.example/a/b@sha256:abc","function":"tools.math:Calc.add","args":[1, "x"],"kwargs":{"k": [true, null]},"timeout_s":120,"env":{"UNITS":"metric"}}`,
			Call{Image: "reg.example/a/b@sha256:abc", Module: "tools.math", Attr: "Calc.add", Args: json.RawMessage(`[1,"x"]`), Kwargs: json.RawMessage(`{"k":[true,null]}`),
				Timeout: 120 * time.Second, Env: map[string]string{"UNITS": "metric"}}},
		{"a whole float timeout", `{"image":"a","function":"m:f","timeout_s":45.0}`,
			Call{Image: "a", Module: "m", Attr: "f", Args: json.RawMessage("[]"), Kwargs: json.RawMessage("{}"), Timeout: 45 * time.Second}},
		{"nulls", `{"image":"a","function":"m:f","args":null,"kwargs":null,"timeout_s":null,"env":null}`,
			Call{Image: "a", Module: "m", Attr: "f", Args: json.RawMessage("[]"), Kwargs: json.RawMessage("{}"), Timeout: 30 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeCall(strings.NewReader(tt.body))
			if err != nil {
				t.Fatalf("DecodeCall: %v", err)
			}
			if got.Image != tt.want.Image || got.Module != tt.want.Module || got.Attr != tt.want.Attr ||
				string(got.Args) != string(tt.want.Args) || string(got.Kwargs) != string(tt.want.Kwargs) ||
				got.Timeout != tt.want.Timeout || len(got.Env) != len(tt.want.Env) {
				t.Errorf("DecodeCall = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeCallRefuses(t *testing.T) {
	ok := `"image":"a:1","function":"m:f"`
	tests := []struct {
		name, body, want string
		status           int
	}{
		{"no image", `{"function":"m:f"}`, "missing image", 400},
		{"a lone surrogate in an argument", `{` + ok + `,"args":["\udcff"]}`, `a lone surrogate \udcff`, 400},
		{"bytes that are not UTF-8", `{` + ok + ",\"args\":[\"\xff\"]}", "the body is not UTF-8", 400},
		{"no function", `{"image":"a"}`, "missing function", 400},
		{"function without colon", `{"image":"a","function":"tools.weather.get"}`, `function "tools.weather.get"`, 400},
		{"function with two colons", `{"image":"a","function":"a:b:c"}`, "function", 400},
		{"function path starting with a digit", `{"image":"a","function":"1tools:get"}`, "function", 400},
		{"function with a call", `{"image":"a","function":"m:f()"}`, "function", 400},
		{"function with an empty component", `{"image":"a","function":"m..x:f"}`, "function", 400},
		{"image with spaces", `{"image":"a b","function":"m:f"}`, `image "a b"`, 400},
		{"image with ..", `{"image":"reg/../x","function":"m:f"}`, "image", 400},
		{"args an object", `{` + ok + `,"args":{"a":1}}`, "args: must be an array, got an object", 400},
		{"args a string", `{` + ok + `,"args":"x"}`, "args: must be an array, got a string", 400},
		{"kwargs an array", `{` + ok + `,"kwargs":[1]}`, "kwargs: must be an object, got an array", 400},
		{"timeout zero", `{` + ok + `,"timeout_s":0}`, "timeout_s 0 out of range", 400},
		{"timeout over", `{` + ok + `,"timeout_s":121}`, "timeout_s 121 out of range: must be from 1 to 120", 400},
		{"env bad name", `{` + ok + `,"env":{"A-B":"x"}}`, `env: name "A-B"`, 400},
		{"env not a string", `{` + ok + `,"env":{"A":1}}`, `"env`, 400},
		{"env NUL", `{` + ok + `,"env":{"A":"x\u0000"}}`, "NUL", 400},
		{"unknown field", `{` + ok + `,"code":"x"}`, `unknown field "code"`, 400},
		{"field in other case", `{` + ok + `,"Args":[]}`, `unknown field "Args"`, 400},
		{"field twice", `{` + ok + `,"args":[],"args":[1]}`, `field "args" given twice`, 400},
		{"trailing data", `{` + ok + `} {}`, "unexpected data", 400},
		{"empty", ``, "empty body", 400},
		{"not an object", `[1]`, "must be a JSON object", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCall(strings.NewReader(tt.body))
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("DecodeCall(%s) = %v, want an *Error", tt.body, err)
			}
			if ae.Status != tt.status || !strings.Contains(ae.Msg, tt.want) {
				t.Errorf("DecodeCall(%s) = %d %q, want %d containing %q", tt.body, ae.Status, ae.Msg, tt.status, tt.want)
			}
		})
	}
}

func TestDecodeCallBodyLimit(t *testing.T) {
	body := `{"image":"a","function":"m:f","args":["` + strings.Repeat("x", 2<<20) + `"]}`
	rec := httptest.NewRecorder()
	_, err := DecodeCall(http.MaxBytesReader(rec, stdio.NopCloser(strings.NewReader(body)), DefaultMaxBody))
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 MiB argument: %v, want 413", err)
	}
}

func TestCallPolicy(t *testing.T) {
	p := CallPolicy{Images: []string{"reg.example/agents/", "agent:dev", "other/tool:*"}, EnvDeny: DefaultEnvDeny,
		ImagesSetting: "--tool-images", EnvDenySetting: "--tool-env-deny"}
	for _, tt := range []struct {
		image string
		want  bool
	}{
		{"reg.example/agents/weather:1", true},
		{"reg.example/agents", false},
		{"reg.example/agentsx/weather:1", false},
		{"agent:dev", true},
		{"agent:dev2", false},
		{"docker.io/library/agent:dev", false},
		{"other/tool:v2", true},
		{"other/tools:v2", false},
	} {
		if got := p.ImageAllowed(tt.image); got != tt.want {
			t.Errorf("ImageAllowed(%q) = %v, want %v", tt.image, got, tt.want)
		}
	}
	call := Call{Image: "evil:1"}
	err := p.Check(call)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || !strings.Contains(ae.Msg, "--tool-images") {
		t.Errorf("image off the list: %v, want 403 naming the setting", err)
	}
	for _, name := range []string{"OPENAI_API_KEY", "github_token", "Db_Password", "AWS_SECRET_ACCESS_KEY"} {
		err := p.Check(Call{Image: "agent:dev", Env: map[string]string{"UNITS": "x", name: "v"}})
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Msg, name) || !strings.Contains(ae.Msg, "--tool-env-deny") {
			t.Errorf("env %s: %v, want 400 naming it and the setting", name, err)
		}
	}
	if err := p.Check(Call{Image: "agent:dev", Env: map[string]string{"UNITS": "metric", "MONKEYS": "3"}}); err == nil {
		// MONKEYS contains KEY: the default patterns are blunt on purpose.
		t.Error("MONKEYS passed *KEY*")
	}
	if err := p.Check(Call{Image: "agent:dev", Env: map[string]string{"UNITS": "metric"}}); err != nil {
		t.Errorf("allowed call refused: %v", err)
	}
	if err := ValidateImagePatterns([]string{"a*b"}); err == nil {
		t.Error("a * inside an entry passed")
	}
	if err := ValidateImagePatterns([]string{"*"}); err == nil {
		t.Error("an allow-everything entry passed")
	}
	if err := ValidateEnvDeny([]string{"[", ""}); err == nil {
		t.Error("a broken glob passed")
	}
}

func TestEncodeCallResultFits(t *testing.T) {
	small := wire.CallResult{SandboxID: "p", Result: json.RawMessage(`{"a":"<&>"}`), Process: wire.Process{Stdout: "hi\n"}}
	b, got, err := EncodeCallResult(small, 0)
	if err != nil || !strings.Contains(string(b), `"result":{"a":"<&>"}`) || got.StdoutTruncated {
		t.Fatalf("small answer: %s %v", b, err)
	}

	// Big streams and a big value: the streams are cut, the value kept whole.
	value := `"` + strings.Repeat("v", 5<<20) + `"`
	big := wire.CallResult{SandboxID: "p", Result: json.RawMessage(value), Process: wire.Process{Stdout: strings.Repeat("o\x01", 1<<20), Stderr: strings.Repeat("é", 1<<19)}}
	b, got, err = EncodeCallResult(big, MaxCallAnswer)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxCallAnswer {
		t.Fatalf("answer %d bytes, over %d", len(b), MaxCallAnswer)
	}
	var back wire.CallResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("answer is not JSON: %v", err)
	}
	if string(back.Result) != value || back.Error != nil {
		t.Errorf("the value was not kept whole (%d bytes)", len(back.Result))
	}
	if !got.StdoutTruncated || !strings.Contains(back.Stdout, "bytes of stdout dropped here") {
		t.Errorf("stdout not cut and marked: truncated=%v", got.StdoutTruncated)
	}

	// A value over the limit: no result, an error of its own kind naming its size.
	huge := wire.CallResult{SandboxID: "p", Result: json.RawMessage(`"` + strings.Repeat("v", 9<<20) + `"`), Process: wire.Process{Stdout: "printed\n"}}
	b, _, err = EncodeCallResult(huge, MaxCallAnswer)
	if err != nil {
		t.Fatal(err)
	}
	back = wire.CallResult{}
	if err := json.Unmarshal(b, &back); err != nil || len(b) > MaxCallAnswer {
		t.Fatalf("too-large answer: %d bytes, %v", len(b), err)
	}
	if string(back.Result) != "null" || back.Error == nil || back.Error.Kind != wire.CallTooLarge ||
		!strings.Contains(back.Error.Message, "return value is 9437186 bytes") || back.Stdout != "printed\n" {
		t.Errorf("too-large value: result %.20s error %+v", back.Result, back.Error)
	}
}

func TestClipStreamKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 1000)
	c := clipStream(s, 101, "stdout")
	if !strings.Contains(c, "dropped here") || strings.ContainsRune(c, '\uFFFD') {
		t.Errorf("clip: %q", c)
	}
}
