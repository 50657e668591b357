package modes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEgressMode runs `sandbox egress` against a fake API server with no
// tool pods, on real sockets: it binds both listeners, is Ready once it
// has listed the pods and the fenced policy, refuses a CONNECT it cannot
// attribute with a 403 that says why, and counts it in /metrics.
func TestEgressMode(t *testing.T) {
	c := parse(t, "egress", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--kubeconfig", fakeAPIServer(t), "--namespace", "sandbox").Egress
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- c.Run(&Deps{Ctx: ctx, Stdout: new(bytes.Buffer), Stderr: &logs}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("egress: %v", err)
		}
	}()

	var start struct{ Listen, Admin string }
	for end := time.Now().Add(10 * time.Second); start.Listen == ""; time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"sandbox egress"`) {
				_ = json.Unmarshal([]byte(l), &start)
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no start line in 10 s; logs:\n%s", logs.String())
		}
	}
	admin := "http://" + start.Admin
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := http.Get(admin + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(end) {
			t.Fatalf("not Ready in 10 s: %v; logs:\n%s", err, logs.String())
		}
	}

	conn, err := net.Dial("tcp", start.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "no live tool pod") {
		t.Fatalf("CONNECT from an unknown source: %d %q", res.StatusCode, body)
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := http.Get(admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(m), `sandbox_egress_connections_total{reason="unattributed",verdict="refused"} 1`) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the refusal is not counted:\n%s", m)
		}
	}
	if !strings.Contains(logs.String(), `"reason":"unattributed"`) {
		t.Errorf("no log line for the refusal:\n%s", logs.String())
	}
}
