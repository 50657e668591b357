package modes

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLocalRefusesTheNetworkWithoutAuth: the local backend, whose default
// is no authentication, will not listen where other hosts reach it unless
// told so in a flag that says it is unsafe; on loopback it needs nothing.
func TestLocalRefusesTheNetworkWithoutAuth(t *testing.T) {
	c := parse(t, "serve", "--backend", "local", "--listen", "0.0.0.0:0").Serve
	err := c.Run(&Deps{Ctx: context.Background(), Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer)})
	if err == nil || !strings.Contains(err.Error(), "--unsafe-no-auth-on-network") {
		t.Fatalf("serve --listen 0.0.0.0:0 without auth: %v, want a refusal naming the unsafe flag", err)
	}
	for _, c := range []struct {
		listen string
		want   bool
	}{
		{"127.0.0.1:8080", true}, {"[::1]:8080", true}, {"localhost:8080", true},
		{"0.0.0.0:8080", false}, {":8080", false}, {"192.0.2.1:8080", false}, {"nonsense", false},
	} {
		if got := loopback(c.listen); got != c.want {
			t.Errorf("loopback(%q) = %v, want %v", c.listen, got, c.want)
		}
	}
	// The control: told, it serves on every address.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c = parse(t, "serve", "--backend", "local", "--listen", fmt.Sprintf("0.0.0.0:%d", port), "--unsafe-no-auth-on-network").Serve
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(&Deps{Ctx: ctx, Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer)}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve with --unsafe-no-auth-on-network: %v", err)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve with --unsafe-no-auth-on-network never answered: %v", err)
		}
	}
}
