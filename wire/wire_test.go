package wire

import (
	"encoding/json"
	"testing"
)

// TestJSONFieldOrder pins the JSON of a result and of a call result to the
// byte, every field set and none: clients compare answers as text, and
// embedding Process must not move a field.
func TestJSONFieldOrder(t *testing.T) {
	full := Process{Stdout: "o<&>", Stderr: "e", ExitCode: 3, DurationMS: 7,
		StdoutTruncated: true, StderrTruncated: true, TimedOut: true, OOMKilled: true}
	for _, tt := range []struct {
		name string
		v    any
		want string
	}{
		{"result", Result{SandboxID: "s", RequestID: "r", Process: full,
			Files:           []OutputFile{{Path: "a", Size: 1, Content: "x", Encoding: EncodingUTF8}},
			FilesIncomplete: true, Usage: Usage{CPUMS: 1, MaxRSSKiB: 2, Processes: 3}},
			`{"sandbox_id":"s","request_id":"r","stdout":"o<&>","stderr":"e","exit_code":3,"duration_ms":7,"stdout_truncated":true,` +
				`"stderr_truncated":true,"timed_out":true,"oom_killed":true,"files":[{"path":"a","size":1,"content":"x",` +
				`"encoding":"utf-8"}],"files_incomplete":true,"usage":{"cpu_ms":1,"max_rss_kib":2,"processes":3}}`},
		{"empty result", Result{},
			`{"sandbox_id":"","stdout":"","stderr":"","exit_code":0,"duration_ms":0,"stdout_truncated":false,` +
				`"stderr_truncated":false,"timed_out":false,"oom_killed":false,"usage":{"cpu_ms":0,"max_rss_kib":0,"processes":0}}`},
		{"call result", CallResult{SandboxID: "s", RequestID: "r", Result: json.RawMessage(`{"a":1}`),
			Error: &CallError{Kind: CallRaised, Type: "T", Message: "m", Traceback: "tb"}, Process: full},
			`{"sandbox_id":"s","request_id":"r","result":{"a":1},"error":{"kind":"raised","type":"T","message":"m","traceback":"tb"},` +
				`"stdout":"o<&>","stderr":"e","exit_code":3,"duration_ms":7,"stdout_truncated":true,"stderr_truncated":true,` +
				`"timed_out":true,"oom_killed":true}`},
		{"empty call result", CallResult{Result: json.RawMessage("null")},
			`{"sandbox_id":"","result":null,"stdout":"","stderr":"","exit_code":0,"duration_ms":0,` +
				`"stdout_truncated":false,"stderr_truncated":false,"timed_out":false,"oom_killed":false}`},
		{"request", ExecuteRequest{Code: "x<y"}, `{"code":"x<y"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Marshal(tt.v)
			if err != nil || string(b) != tt.want+"\n" {
				t.Errorf("got  %s(%v)\nwant %s", b, err, tt.want)
			}
		})
	}
}
