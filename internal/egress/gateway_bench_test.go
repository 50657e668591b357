package egress

import (
	"crypto/tls"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// BenchmarkHTTPSGet is a tool's HTTPS GET on a new connection, directly
// and through the gateway, on loopback: the difference is what the gateway
// adds to a request (attribution, the CONNECT, the lookup, the dial, the
// hello read), not what a real network costs.
func BenchmarkHTTPSGet(b *testing.B) {
	r := newRig(b, Options{})
	r.addPod(b, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.pool, ServerName: "allowed.test"}, DisableKeepAlives: true}}
	for _, bb := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"direct", direct, "https://127.0.0.1:" + strconv.Itoa(r.port) + "/"},
		{"gateway", r.client(), r.url("allowed.test", "/")},
	} {
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				res, err := bb.c.Get(bb.url)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
}

// BenchmarkDownload is one large HTTPS download through the gateway: its
// throughput on loopback (MB/s).
func BenchmarkDownload(b *testing.B) {
	r := newRig(b, Options{})
	r.addPod(b, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	const size = 64 << 20
	b.SetBytes(size)
	c := r.client()
	for b.Loop() {
		res, err := c.Get(r.url("allowed.test", "/?size="+strconv.Itoa(size)))
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if n != size {
			b.Fatalf("got %d bytes", n)
		}
	}
}
