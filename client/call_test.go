package client

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

func TestCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req wire.CallRequest
		if r.URL.Path != "/v1/call" || json.Unmarshal(b, &req) != nil || req.Function != "tools.w:get" || string(req.Kwargs) != `{"city":"Oslo"}` {
			api.WriteError(w, 400, "bad request: "+string(b))
			return
		}
		api.WriteCallResult(w, wire.CallResult{SandboxID: "sandbox-tool-a", Result: json.RawMessage(`"sunny"`)})
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Call(t.Context(), wire.CallRequest{Image: "agent:dev", Function: "tools.w:get", Kwargs: json.RawMessage(`{"city":"Oslo"}`)})
	if err != nil || string(res.Result) != `"sunny"` || res.SandboxID != "sandbox-tool-a" {
		t.Fatalf("Call = %+v, %v", res, err)
	}
	_, err = c.Call(t.Context(), wire.CallRequest{Image: "agent:dev", Function: "x:y"})
	if ce, ok := err.(*Error); !ok || ce.StatusCode != 400 {
		t.Errorf("refused call: %v", err)
	}
}
