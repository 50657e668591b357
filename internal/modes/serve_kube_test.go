package modes

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPIServer answers just enough of the Kubernetes API for the pool to
// start: empty pod lists, and watches that send nothing (with the bookmark
// that ends a watch-list's initial events). It writes a kubeconfig for it and
// returns the file's path.
func fakeAPIServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		// Pods, and the one NetworkPolicy the egress gateway reads.
		kind, apiVersion := "Pod", "v1"
		if strings.Contains(r.URL.Path, "/networkpolicies") {
			kind, apiVersion = "NetworkPolicy", "networking.k8s.io/v1"
		}
		switch {
		case r.Method == http.MethodGet && q.Get("watch") == "true":
			if q.Get("sendInitialEvents") == "true" {
				fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind, apiVersion)
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case r.Method == http.MethodGet:
			fmt.Fprintf(w, `{"kind":"%sList","apiVersion":%q,"metadata":{"resourceVersion":"1"},"items":[]}`, kind, apiVersion)
		default:
			// Creates and deletes: refused, which the pool logs and retries.
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
users: [{name: fake, user: {}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// syncBuffer is a bytes.Buffer safe to write from serve's goroutines while
// the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestServeKubeLogger checks that the pool logs through serve's logger, so
// that --log-format and --log-level apply to its lines too.
func TestServeKubeLogger(t *testing.T) {
	c := parse(t, "serve", "--backend", "kubernetes", "--listen", "127.0.0.1:0",
		"--kubeconfig", fakeAPIServer(t), "--namespace", "sandbox", "--log-format", "text",
		"--seal-probe", "10.96.0.1:443").Serve
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- c.Run(&Deps{Ctx: ctx, Stdout: new(bytes.Buffer), Stderr: &logs}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	// The pool says this once its informer has synced.
	const line = "pool watching pods"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in 10 s; logs:\n%s", line, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.HasPrefix(l, "time=") {
			t.Errorf("a log line not in --log-format text: %s", l)
		}
	}
}

// TestSealOptions: inside a cluster serve proves its pods against the API
// server's Service and its own cluster DNS, asked in its cluster domain;
// outside one it needs --seal-probe, and refuses to start without it (no
// pod could ever be Ready).
func TestSealOptions(t *testing.T) {
	inCluster := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	resolv := func(string) ([]byte, error) {
		return []byte("search sandbox.svc.k8s.example svc.k8s.example k8s.example\nnameserver 10.96.0.10\noptions ndots:5\n"), nil
	}
	noFile := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	for _, tc := range []struct {
		name          string
		flags         KubeFlags
		env           map[string]string
		read          func(string) ([]byte, error)
		probes, dns   string
		dnsName, fail string
	}{
		{name: "in a cluster", env: inCluster, read: resolv,
			probes: "10.96.0.1:443", dns: "10.96.0.10:53", dnsName: "kubernetes.default.svc.k8s.example."},
		{name: "flags win", flags: KubeFlags{SealProbe: []string{"172.20.0.1:443"}, SealDNS: []string{"172.20.0.10:53"}}, env: inCluster, read: resolv,
			probes: "172.20.0.1:443", dns: "172.20.0.10:53", dnsName: "kubernetes.default.svc.k8s.example."},
		{name: "outside a cluster", flags: KubeFlags{SealProbe: []string{"10.96.0.1:443"}}, read: resolv,
			probes: "10.96.0.1:443", dnsName: "kubernetes.default.svc.cluster.local."},
		{name: "outside a cluster without --seal-probe", read: noFile, fail: "--seal-probe"},
		{name: "bad address", flags: KubeFlags{SealProbe: []string{"10.96.0.1"}}, read: noFile, fail: "missing port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.flags.sealOptions(func(k string) string { return tc.env[k] }, tc.read)
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Fatalf("err = %v, want one naming %s", err, tc.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(o.Probes, ","); got != tc.probes {
				t.Errorf("probes %q, want %q", got, tc.probes)
			}
			if got := strings.Join(o.DNS, ","); got != tc.dns {
				t.Errorf("dns %q, want %q", got, tc.dns)
			}
			if o.DNSName != tc.dnsName {
				t.Errorf("dns name %q, want %q", o.DNSName, tc.dnsName)
			}
		})
	}
}
