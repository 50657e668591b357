package modes

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestExecRunBrokeOff: output that came is printed, and a run that broke
// off after it began (an error event) says so in one line, exit 125.
func TestExecRunBrokeOff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", "req-3")
		io.WriteString(w, "event: stdout\ndata: \"partial\\n\"\n\n"+
			"event: error\ndata: {\"error\":\"sandbox pod p died during the run: Evicted\",\"status\":502}\n\n")
	}))
	defer srv.Close()
	code, stdout, stderr := runExec(t, srv.URL, "-c", "print(1)")
	want := "sandbox: exec: the run broke off after it began (502): sandbox pod p died during the run: Evicted [request req-3]\n"
	if code != exitNotRun || stdout != "partial\n" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout, stderr, exitNotRun, "partial\n", want)
	}
}
