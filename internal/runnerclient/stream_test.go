package runnerclient

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

// TestPostStream: each way a runner can answer a request for events is
// read into what serve tells apart: events then a result, an error event
// (the run began: serve's answer, never a refusal to try elsewhere), a
// stream cut short (a *Lost), plain JSON from a runner that does not
// stream, and a refusal before anything ran.
func TestPostStream(t *testing.T) {
	const events = "text/event-stream"
	for _, tt := range []struct {
		name, ctype, body string
		status            int
		wantOut, wantRes  string
		check             func(t *testing.T, err error)
	}{
		{name: "events", ctype: events, status: 200,
			body:    "event: stdout\ndata: \"a\\n\"\n\n: a comment\n\nevent: stderr\ndata: \"e\"\n\nevent: result\ndata: {\"sandbox_id\":\"p\",\"exit_code\":0,\"stdout\":\"a\\n\"}\n\n",
			wantOut: "stdout:a\n|stderr:e|", wantRes: "a\n"},
		{name: "error event", ctype: events, status: 200,
			body:    "event: stdout\ndata: \"a\"\n\nevent: error\ndata: {\"error\":\"run: wait: boom\",\"status\":500}\n\n",
			wantOut: "stdout:a|",
			check: func(t *testing.T, err error) {
				var r *Refusal
				if ae, ok := api.AsError(err); !ok || errors.As(err, &r) || ae.Status != 502 || !strings.Contains(ae.Msg, "pod p") {
					t.Fatalf("%#v", err)
				}
			}},
		{name: "cut short", ctype: events, status: 200, body: "event: stdout\ndata: \"a\"\n\n",
			wantOut: "stdout:a|",
			check: func(t *testing.T, err error) {
				var lost *Lost
				if !errors.As(err, &lost) {
					t.Fatalf("%#v, want a *Lost", err)
				}
			}},
		{name: "plain JSON", ctype: "application/json", status: 200, body: `{"sandbox_id":"p","exit_code":0,"stdout":"all"}`, wantRes: "all"},
		{name: "refused", ctype: "application/json", status: 409, body: `{"error":"taken"}`,
			check: func(t *testing.T, err error) {
				var r *Refusal
				if !errors.As(err, &r) || r.Status != 409 {
					t.Fatalf("%#v", err)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Accept") != events {
					http.Error(w, "no Accept: "+events, http.StatusTeapot)
					return
				}
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tt.ctype)
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			var (
				res wire.Result
				out strings.Builder
			)
			_, err := PostStream(t.Context(), srv.Client(), srv.Listener.Addr().String(), "/v1/execute", "pod p", []byte(`{}`), 1<<20, &res,
				func(stream, text string) { out.WriteString(stream + ":" + text + "|") })
			if tt.check != nil {
				tt.check(t, err)
			} else if err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.wantOut || res.Stdout != tt.wantRes {
				t.Errorf("output %q, result stdout %q; want %q, %q", out.String(), res.Stdout, tt.wantOut, tt.wantRes)
			}
		})
	}
}
