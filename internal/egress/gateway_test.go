package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/weaken"
)

const testNS = "sandbox"

// mapResolver answers from a table; a name not in it does not exist.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if !strings.HasSuffix(host, ".") {
		return nil, fmt.Errorf("%q is not absolute: the pod's search domains would apply", host)
	}
	if a, ok := m[strings.TrimSuffix(host, ".")]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// rig is a gateway on 127.0.0.1 in front of a real HTTPS server (a
// self-signed certificate for allowed.test and other.test) and a plain
// HTTP one, the tool pods it knows in a fake API server.
type rig struct {
	gw      *Gateway
	proxy   *url.URL
	tls     *httptest.Server
	plain   *httptest.Server
	port    int // the HTTPS server's
	pool    *x509.CertPool
	cs      *fake.Clientset
	pods    *Pods
	dials   atomic.Int32
	resolve mapResolver
}

func selfSigned(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// echo answers with the host it was asked for and the body it got.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if n, err := strconv.Atoi(r.URL.Query().Get("size")); err == nil {
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = io.CopyN(w, zeros{}, int64(n))
		return
	}
	fmt.Fprintf(w, "host=%s got=%d sum=%d", r.Host, len(b), sum(b))
})

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func sum(b []byte) int {
	s := 0
	for _, c := range b {
		s += int(c)
	}
	return s
}

func newRig(t testing.TB, o Options) *rig {
	t.Helper()
	r := &rig{cs: fake.NewClientset()}
	cert, pool := selfSigned(t, "allowed.test", "other.test")
	r.pool = pool
	r.tls = httptest.NewUnstartedServer(echo)
	r.tls.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	r.tls.StartTLS()
	t.Cleanup(r.tls.Close)
	r.plain = httptest.NewServer(echo)
	t.Cleanup(r.plain.Close)
	r.port = r.tls.Listener.Addr().(*net.TCPAddr).Port
	lo := netip.MustParseAddr("127.0.0.1")
	r.resolve = mapResolver{
		"allowed.test": {lo}, "other.test": {lo}, "plain.test": {lo},
		"rebind.test": {netip.MustParseAddr("10.0.0.1")}, "meta.test": {netip.MustParseAddr("169.254.169.254")},
		"loop6.test": {netip.MustParseAddr("::1")}, "ula.test": {netip.MustParseAddr("fc00::1")},
		"mapped.test": {netip.MustParseAddr("::ffff:10.1.2.3")}, "cgnat.test": {netip.MustParseAddr("100.100.100.200")},
		"mixed.test": {lo, netip.MustParseAddr("192.168.1.1")},
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.pods = NewPods(r.cs, testNS, nil)
	podsDone := make(chan struct{})
	go func() { defer close(podsDone); r.pods.Run(ctx) }()
	o.Sources = r.pods
	o.Resolver = r.resolve
	o.Permit = append(o.Permit, netip.MustParsePrefix("127.0.0.1/32"))
	d := &net.Dialer{Timeout: time.Second}
	o.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	o.Drain = time.Second
	o.Logger = slog.New(slog.NewTextHandler(tOutput(t), nil))
	gw, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.gw = gw
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.proxy = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		<-podsDone
	})
	for end := time.Now().Add(5 * time.Second); !r.pods.Synced(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("pods not synced")
		}
	}
	return r
}

func tOutput(t testing.TB) io.Writer {
	if tt, ok := t.(*testing.T); ok {
		return tt.Output()
	}
	return io.Discard
}

// addPod makes a live gateway tool pod on 127.0.0.1 with allow (no
// annotation when ""), and waits until the gateway sees it as it is.
func (r *rig) addPod(t testing.TB, name, uid, allow string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID(uid),
			Labels:      map[string]string{kube.LabelName: kube.RunnerName, kube.LabelKind: kube.KindTool, kube.LabelEgress: kube.EgressGateway},
			Annotations: map[string]string{kube.AnnotationRequestID: "req-" + name}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: kube.RunnerContainer, Image: "agent:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}},
	}
	if allow != "" {
		p.Annotations[kube.AnnotationEgressAllow] = allow
	}
	if _, err := r.cs.CoreV1().Pods(testNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitPods(t, func() bool {
		r.pods.mu.Lock()
		defer r.pods.mu.Unlock()
		_, ok := r.pods.byUID[types.UID(uid)]
		return ok == (allow != "")
	})
	if allow == "" {
		// Nothing to see: give the informer the event anyway.
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *rig) deletePod(t testing.TB, name, uid string) {
	t.Helper()
	if err := r.cs.CoreV1().Pods(testNS).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitPods(t, func() bool {
		r.pods.mu.Lock()
		defer r.pods.mu.Unlock()
		_, ok := r.pods.byUID[types.UID(uid)]
		return !ok
	})
}

func (r *rig) waitPods(t testing.TB, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the gateway did not see the pod change")
		}
	}
}

// client is a tool's HTTP client through the gateway, trusting the test
// certificate, one connection per request.
func (r *rig) client() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(r.proxy),
		TLSClientConfig: &tls.Config{RootCAs: r.pool}, DisableKeepAlives: true}}
}

func (r *rig) url(host, path string) string {
	return "https://" + net.JoinHostPort(host, strconv.Itoa(r.port)) + path
}

// connect opens a CONNECT tunnel to target and returns the connection and
// the gateway's answer line and body.
func (r *rig) connect(t testing.TB, target string) (net.Conn, int, string) {
	t.Helper()
	c, err := net.Dial("tcp", r.proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	body := ""
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		body = string(b)
	}
	return c, res.StatusCode, body
}

func (r *rig) count(verdict, reason string) float64 {
	return testutil.ToFloat64(r.gw.m.conns.WithLabelValues(verdict, reason))
}

// waitCount waits for the gateway to record a decision, which it does as
// the connection ends.
func (r *rig) waitCount(t *testing.T, verdict, reason string, want float64) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); r.count(verdict, reason) < want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s/%s = %v, want %v", verdict, reason, r.count(verdict, reason), want)
		}
	}
}

func TestAllowedConnectCarriesBothWays(t *testing.T) {
	r := newRig(t, Options{})
	r.addPod(t, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	body := bytes.Repeat([]byte("exfil?"), 100_000)
	res, err := r.client().Post(r.url("allowed.test", "/"), "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	want := fmt.Sprintf("host=allowed.test:%d got=%d sum=%d", r.port, len(body), sum(body))
	if string(got) != want {
		t.Fatalf("answer %q, want %q", got, want)
	}
	res, err = r.client().Get(r.url("allowed.test", "/?size=3000000"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if n != 3_000_000 {
		t.Errorf("downloaded %d bytes, want 3000000", n)
	}
	r.waitCount(t, "allowed", "done", 2)
	if in := testutil.ToFloat64(r.gw.m.bytes.WithLabelValues("in")); in < 3_000_000 {
		t.Errorf("bytes in counted %v", in)
	}
	if out := testutil.ToFloat64(r.gw.m.bytes.WithLabelValues("out")); out < float64(len(body)) {
		t.Errorf("bytes out counted %v", out)
	}
}

func TestSNIMismatchRefused(t *testing.T) {
	r := newRig(t, Options{})
	r.addPod(t, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	for _, sni := range []string{"other.test", ""} {
		c, status, _ := r.connect(t, "allowed.test:"+strconv.Itoa(r.port))
		if status != http.StatusOK {
			t.Fatalf("CONNECT: %d", status)
		}
		// The certificate holds other.test too: only the gateway stands
		// between this hello and the server.
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: r.pool, InsecureSkipVerify: sni == ""})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Fatalf("SNI %q: the handshake with the server succeeded through a CONNECT to allowed.test", sni)
		}
	}
	r.waitCount(t, "refused", "sni_mismatch", 2)
}

func TestNotTLSRefused(t *testing.T) {
	r := newRig(t, Options{})
	r.addPod(t, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	c, status, _ := r.connect(t, "allowed.test:"+strconv.Itoa(r.port))
	if status != http.StatusOK {
		t.Fatalf("CONNECT: %d", status)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("plain HTTP inside a CONNECT got an answer: %q", b)
	}
	r.waitCount(t, "refused", "not_tls", 1)
}

func TestRefusals(t *testing.T) {
	r := newRig(t, Options{})
	port := strconv.Itoa(r.port)
	list := "allowed.test:" + port + ",rebind.test:" + port + ",meta.test:" + port + ",loop6.test:" + port + ",ula.test:" + port +
		",mapped.test:" + port + ",cgnat.test:" + port + ",mixed.test:" + port + ",gone.test:" + port
	r.addPod(t, "tool-a", "uid-a", list)
	for _, tt := range []struct {
		target string
		status int
		reason string
		says   string
	}{
		{"other.test:" + port, 403, "not_allowed", "not in tool pod tool-a's allow list"},
		{"allowed.test:443", 403, "not_allowed", "port 443"},
		{"127.0.0.1:" + port, 403, "ip_literal", "is an address"},
		{"[::1]:" + port, 403, "ip_literal", "is an address"},
		{"rebind.test:" + port, 403, "private_address", "10.0.0.1, which is private"},
		{"meta.test:" + port, 403, "private_address", "cloud metadata"},
		{"loop6.test:" + port, 403, "private_address", "loopback"},
		{"ula.test:" + port, 403, "private_address", "unique local"},
		{"mapped.test:" + port, 403, "private_address", "10.1.2.3"},
		{"cgnat.test:" + port, 403, "private_address", "CGNAT"},
		{"mixed.test:" + port, 403, "private_address", "192.168.1.1"},
		{"gone.test:" + port, 502, "resolve_failed", "cannot resolve"},
		{"bad_host..test:" + port, 400, "bad_request", "host"},
	} {
		t.Run(tt.target, func(t *testing.T) {
			before := r.dials.Load()
			_, status, body := r.connect(t, tt.target)
			if status != tt.status || !strings.Contains(body, tt.says) {
				t.Errorf("CONNECT %s: %d %q; want %d saying %q", tt.target, status, body, tt.status, tt.says)
			}
			if r.dials.Load() != before {
				t.Errorf("CONNECT %s: the gateway dialled", tt.target)
			}
		})
	}
	r.waitCount(t, "refused", "private_address", 7)
}

// An address is dialled only when the list holds it as an address; the
// hello then carries no name.
func TestListedIPLiteral(t *testing.T) {
	r := newRig(t, Options{})
	r.addPod(t, "tool-a", "uid-a", "127.0.0.1:"+strconv.Itoa(r.port))
	res, err := r.client().Get(r.url("127.0.0.1", "/"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
}

func TestUnknownSourceRefused(t *testing.T) {
	r := newRig(t, Options{})
	_, status, body := r.connect(t, "allowed.test:"+strconv.Itoa(r.port))
	if status != http.StatusForbidden || !strings.Contains(body, "no live tool pod") {
		t.Fatalf("no pod: %d %q", status, body)
	}
	// A pod on another address is no one's source here either.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: testNS, UID: "uid-x",
		Labels:      map[string]string{kube.LabelName: kube.RunnerName, kube.LabelKind: kube.KindTool, kube.LabelEgress: kube.EgressGateway},
		Annotations: map[string]string{kube.AnnotationEgressAllow: "allowed.test"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7"}}
	if _, err := r.cs.CoreV1().Pods(testNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitPods(t, func() bool { r.pods.mu.Lock(); defer r.pods.mu.Unlock(); return len(r.pods.byUID) == 1 })
	if _, status, _ := r.connect(t, "allowed.test:"+strconv.Itoa(r.port)); status != http.StatusForbidden {
		t.Fatalf("pod elsewhere: %d", status)
	}
	r.waitCount(t, "refused", "unattributed", 2)
}

// A pod's address, reused by a pod made after it, carries the new pod's
// list or none: never the deleted pod's.
func TestReusedAddressNeverInheritsTheList(t *testing.T) {
	r := newRig(t, Options{})
	target := "allowed.test:" + strconv.Itoa(r.port)
	r.addPod(t, "tool-a", "uid-a", target)
	if _, status, _ := r.connect(t, target); status != http.StatusOK {
		t.Fatalf("pod a: %d", status)
	}
	r.deletePod(t, "tool-a", "uid-a")
	r.addPod(t, "tool-b", "uid-b", "")
	if _, status, body := r.connect(t, target); status != http.StatusForbidden || !strings.Contains(body, "no live tool pod") {
		t.Fatalf("pod b without a list: %d %q", status, body)
	}
	r.deletePod(t, "tool-b", "uid-b")
	r.addPod(t, "tool-c", "uid-c", "other.test:"+strconv.Itoa(r.port))
	if _, status, _ := r.connect(t, target); status != http.StatusForbidden {
		t.Fatalf("pod c with another list reached allowed.test: %d", status)
	}
	// A terminating pod is no source.
	p, err := r.cs.CoreV1().Pods(testNS).Get(context.Background(), "tool-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	p.DeletionTimestamp = &now
	if _, err := r.cs.CoreV1().Pods(testNS).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitPods(t, func() bool { r.pods.mu.Lock(); defer r.pods.mu.Unlock(); return len(r.pods.byUID) == 0 })
	if _, status, _ := r.connect(t, "other.test:"+strconv.Itoa(r.port)); status != http.StatusForbidden {
		t.Fatalf("terminating pod: %d", status)
	}
}

func TestConnectionBoundPerPod(t *testing.T) {
	r := newRig(t, Options{MaxConnsPerPod: 2})
	target := "allowed.test:" + strconv.Itoa(r.port)
	r.addPod(t, "tool-a", "uid-a", target)
	c1, s1, _ := r.connect(t, target)
	_, s2, _ := r.connect(t, target)
	_, s3, body := r.connect(t, target)
	if s1 != 200 || s2 != 200 || s3 != http.StatusTooManyRequests || !strings.Contains(body, "2 connections") {
		t.Fatalf("statuses %d %d %d %q: want the third refused", s1, s2, s3, body)
	}
	c1.Close()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, s, _ := r.connect(t, target)
		if s == 200 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("a closed connection did not free its slot")
		}
	}
}

func TestBytesOutBoundPerPod(t *testing.T) {
	r := newRig(t, Options{MaxBytesOutPerPod: 64 << 10})
	r.addPod(t, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	_, err := r.client().Post(r.url("allowed.test", "/"), "application/octet-stream", bytes.NewReader(make([]byte, 256<<10)))
	if err == nil {
		t.Fatal("a 256 KiB upload passed a 64 KiB bound")
	}
	r.waitCount(t, "allowed", "bytes_limit", 1)
	if _, status, body := r.connect(t, "allowed.test:"+strconv.Itoa(r.port)); status != http.StatusForbidden || !strings.Contains(body, "bytes out") {
		t.Fatalf("after the bound: %d %q", status, body)
	}
}

// A pod's connections end when the pod goes.
func TestPodGoneClosesItsConnections(t *testing.T) {
	r := newRig(t, Options{})
	r.addPod(t, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	c, status, _ := r.connect(t, "allowed.test:"+strconv.Itoa(r.port))
	if status != 200 {
		t.Fatal(status)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: r.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	r.deletePod(t, "tool-a", "uid-a")
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("read after the pod went: %v, want the connection closed", err)
	}
	r.waitCount(t, "allowed", "pod_gone", 1)
}

func TestPlainHTTP(t *testing.T) {
	r := newRig(t, Options{})
	pport := r.plain.Listener.Addr().(*net.TCPAddr).Port
	r.addPod(t, "tool-a", "uid-a", "plain.test:"+strconv.Itoa(pport))
	res, err := r.client().Post("http://plain.test:"+strconv.Itoa(pport)+"/x", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if want := fmt.Sprintf("host=plain.test:%d got=5 sum=%d", pport, sum([]byte("hello"))); string(b) != want {
		t.Fatalf("answer %q, want %q", b, want)
	}
	for _, tt := range []struct {
		req    string
		status int
	}{
		{fmt.Sprintf("GET http://plain.test:%d/ HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", pport, pport), 400},
		{fmt.Sprintf("GET http://other.test:%d/ HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", pport, pport), 403},
		{"GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n", 400},
		{fmt.Sprintf("GET http://127.0.0.1:%d/ HTTP/1.1\r\n\r\n", pport), 403},
	} {
		c, err := net.Dial("tcp", r.proxy.Host)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, tt.req)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || res.StatusCode != tt.status {
			t.Errorf("%q: %v %v, want %d", tt.req, res, err, tt.status)
		}
	}
}

// Each gateway weakening opens what a refusal above closes, so that
// verify's checks can be shown to fail against it.
func TestWeakenedGateway(t *testing.T) {
	for _, tt := range []struct {
		w      weaken.Name
		list   string
		target func(r *rig) string
		status int
	}{
		{weaken.EgressAllowAll, "allowed.test:1", func(r *rig) string { return "other.test:" + strconv.Itoa(r.port) }, 200},
		{weaken.EgressRefuseAll, "", func(r *rig) string { return "allowed.test:" + strconv.Itoa(r.port) }, 403},
		{weaken.EgressRebind, "", func(r *rig) string { return "meta.test:" + strconv.Itoa(r.port) }, 502},
	} {
		t.Run(string(tt.w), func(t *testing.T) {
			ws, err := weaken.ParseGateway([]string{string(tt.w)})
			if err != nil {
				t.Fatal(err)
			}
			r := newRig(t, Options{Weaken: ws})
			list := tt.list
			if list == "" {
				list = "allowed.test:" + strconv.Itoa(r.port) + ",meta.test:" + strconv.Itoa(r.port)
			}
			r.addPod(t, "tool-a", "uid-a", list)
			if _, status, body := r.connect(t, tt.target(r)); status != tt.status {
				t.Errorf("CONNECT %s: %d %q, want %d", tt.target(r), status, body, tt.status)
			}
		})
	}
	ws, _ := weaken.ParseGateway([]string{string(weaken.EgressNoSNI)})
	r := newRig(t, Options{Weaken: ws})
	r.addPod(t, "tool-a", "uid-a", "allowed.test:"+strconv.Itoa(r.port))
	c, status, _ := r.connect(t, "allowed.test:"+strconv.Itoa(r.port))
	if status != 200 {
		t.Fatal(status)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "other.test", RootCAs: r.pool})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Errorf("egress-no-sni: the fronted handshake failed: %v", err)
	}
}

// The addresses serve's fence lists on the tool pods' internet policy are
// never dialled, as they change, whatever the permit says.
func TestFencedAddressesRefused(t *testing.T) {
	cs := fake.NewClientset()
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-tool-internet", Namespace: testNS,
		Annotations: map[string]string{kube.FencedAnnotation: "192.0.2.80/32"}}}
	if _, err := cs.NetworkingV1().NetworkPolicies(testNS).Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := NewFenced(cs, testNS, "sandbox-tool-internet")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := newRig(t, Options{Fenced: f.Prefixes, Permit: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	r.resolve["node.test"] = []netip.Addr{netip.MustParseAddr("192.0.2.80")}
	r.resolve["near.test"] = []netip.Addr{netip.MustParseAddr("192.0.2.81")}
	r.addPod(t, "tool-a", "uid-a", "node.test:443,near.test:443")
	r.waitPods(t, func() bool { return len(f.Prefixes()) == 1 })
	if _, status, body := r.connect(t, "node.test:443"); status != http.StatusForbidden || !strings.Contains(body, "denied") {
		t.Errorf("fenced address: %d %q", status, body)
	}
	// near.test is permitted and not fenced: the gateway dials it (and
	// finds nothing there).
	if _, status, _ := r.connect(t, "near.test:443"); status == http.StatusForbidden {
		t.Errorf("an address the fence does not list was refused")
	}
	np.Annotations[kube.FencedAnnotation] = ""
	if _, err := cs.NetworkingV1().NetworkPolicies(testNS).Update(context.Background(), np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitPods(t, func() bool { return len(f.Prefixes()) == 0 })
}
