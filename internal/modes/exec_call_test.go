package modes

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

func TestExecCall(t *testing.T) {
	var got wire.CallRequest
	answer := wire.CallResult{SandboxID: "sandbox-tool-a", Result: json.RawMessage(`{"t":3}`), Process: wire.Process{Stdout: "printed\n"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = wire.CallRequest{}
		json.Unmarshal(b, &got)
		api.WriteCallResult(w, answer)
	}))
	defer srv.Close()

	code, stdout, stderr := runExec(t, srv.URL, "--call", "tools.weather:get", "--image", "agent:dev",
		"--kwargs", `{"city":"Oslo"}`, "--args", `[1]`, "-e", "UNITS=metric", "--timeout", "45s")
	if code != 0 || stdout != "{\"t\":3}\n" || stderr != "printed\n" {
		t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if got.Function != "tools.weather:get" || got.Image != "agent:dev" || string(got.Kwargs) != `{"city":"Oslo"}` ||
		string(got.Args) != "[1]" || *got.TimeoutS != 45 || got.Env["UNITS"] != "metric" {
		t.Errorf("sent %+v", got)
	}

	answer = wire.CallResult{SandboxID: "sandbox-tool-b", Result: json.RawMessage("null"),
		Error: &wire.CallError{Kind: wire.CallRaised, Type: "ValueError", Message: "no", Traceback: "Traceback ...\nValueError: no\n"}, Process: wire.Process{ExitCode: 1},
	}
	code, stdout, stderr = runExec(t, srv.URL, "--call", "tools.weather:get", "--image", "agent:dev")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "ValueError: no") || got.TimeoutS != nil {
		t.Errorf("raised: exit %d stdout %q stderr %q (timeout sent %v)", code, stdout, stderr, got.TimeoutS)
	}
}

func TestExecCallFlags(t *testing.T) {
	for _, args := range [][]string{
		{"exec", "--call", "m:f"},                                   // no image
		{"exec", "--call", "m:f", "--image", "a", "-c", "print(1)"}, // code too
		{"exec", "--image", "a", "-c", "print(1)"},                  // image without call
	} {
		var cli CLI
		p, err := kong.New(&cli, kong.Name("sandbox"), vars())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Parse(args); err == nil {
			t.Errorf("%q parsed", args)
		}
	}
}
