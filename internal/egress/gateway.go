package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandbox/internal/weaken"
)

// Bounds of the gateway, per tool pod and per connection.
const (
	// DefaultMaxConnsPerPod: connections one tool pod holds at once. A
	// tool's HTTP client keeps a few per host (requests and httpx pool ten
	// per host), and a tool reaches few hosts; more is a tool fanning out,
	// on a gateway every tool pod shares.
	DefaultMaxConnsPerPod = 32
	// DefaultMaxBytesOutPerPod: bytes one tool pod sends out, over its
	// life (one call). The call's arguments, all a tool knows of the
	// agent's data, are at most 1 MiB (the API's body limit); 16 times that
	// leaves room for what a tool builds and re-sends (uploads, retries,
	// TLS overhead) and caps what a tool made to carry data off can send.
	// Downloads are not bounded here: the call's timeout and the pod's
	// memory bound them.
	DefaultMaxBytesOutPerPod = 16 << 20
	// maxHeader bounds a proxy request's line and headers.
	maxHeader = 64 << 10
	// handshakeTimeout: a client sends its request, and after the CONNECT
	// its ClientHello, at once.
	handshakeTimeout = 10 * time.Second
	// resolveTimeout and dialTimeout bound the gateway's own lookup and
	// connection: the tool's client waits on them.
	resolveTimeout = 5 * time.Second
	dialTimeout    = 10 * time.Second
	// DefaultDrain: on shutdown, how long connections in flight may finish
	// (a tool call lasts at most two minutes; the other replica takes new
	// connections meanwhile).
	DefaultDrain = 30 * time.Second
)

// Resolver looks names up; *net.Resolver is one, a test's map another.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Gateway.
type Options struct {
	// Sources attributes connections to tool pods (a *Pods in a cluster).
	Sources Sources
	// Resolver resolves names (nil: net.DefaultResolver, the pod's DNS).
	Resolver Resolver
	// Dial connects to the checked address (nil: a net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Deny are addresses never dialled whatever their range (the nodes',
	// the API server's); Permit addresses dialled despite their range (a
	// test's loopback, the kind rig's stand-ins). Deny wins.
	Deny, Permit []netip.Prefix
	// Fenced, if set, adds to Deny as it changes: the addresses serve's
	// fence keeps out of the tool pods' internet policy (a *Fenced).
	Fenced func() []netip.Prefix
	// Bounds per tool pod (0: the defaults above).
	MaxConnsPerPod    int
	MaxBytesOutPerPod int64
	// Drain is how long Serve lets connections finish once ctx ends (0:
	// DefaultDrain).
	Drain  time.Duration
	Logger *slog.Logger
	// Weaken weakens the gateway on purpose (weaken.ParseGateway), for
	// verify's negative tests; the zero Set in every real deployment.
	Weaken weaken.Set
}

// Gateway is the egress gateway: an HTTP proxy (CONNECT for HTTPS, the
// absolute form for HTTP) that lets a tool pod reach only the names its
// list holds. See the package doc and docs/security.md.
type Gateway struct {
	o   Options
	log *slog.Logger
	m   *metrics

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// New checks o and builds a Gateway.
func New(o Options) (*Gateway, error) {
	if o.Sources == nil {
		return nil, errors.New("egress: no sources to attribute connections to")
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		o.Dial = d.DialContext
	}
	if o.MaxConnsPerPod <= 0 {
		o.MaxConnsPerPod = DefaultMaxConnsPerPod
	}
	if o.MaxBytesOutPerPod <= 0 {
		o.MaxBytesOutPerPod = DefaultMaxBytesOutPerPod
	}
	if o.Drain <= 0 {
		o.Drain = DefaultDrain
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Gateway{o: o, log: o.Logger, m: newMetrics(), conns: map[net.Conn]struct{}{}}, nil
}

// RegisterMetrics registers the gateway's metrics.
func (g *Gateway) RegisterMetrics(r prometheus.Registerer) error { return g.m.register(r) }

// PodCount sets the attributable pods gauge (Pods' count callback).
func (g *Gateway) PodCount(n int) { g.m.pods.Set(float64(n)) }

// Serve takes connections on ln until ctx ends, then lets those in flight
// finish for Drain and closes the rest; it returns once every one is done.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var err error
	for {
		var c net.Conn
		c, err = ln.Accept()
		if err != nil {
			break
		}
		g.track(c, true)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer g.track(c, false)
			defer c.Close()
			g.serveConn(ctx, c)
		}()
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(g.o.Drain):
		g.mu.Lock()
		for c := range g.conns {
			c.Close()
		}
		g.mu.Unlock()
		<-done
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (g *Gateway) track(c net.Conn, add bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if add {
		g.conns[c] = struct{}{}
		g.m.active.Inc()
	} else {
		delete(g.conns, c)
		g.m.active.Dec()
	}
}

// decision is one connection's record: its log line and its metrics.
type decision struct {
	src     *Source
	from    netip.Addr
	method  string
	host    string
	port    int
	addr    netip.AddrPort
	sni     string
	allowed bool
	reason  string // why refused, or how an allowed connection ended
	detail  string
	out, in int64
	began   time.Time
}

// refusal is a refused connection: its status, reason label and message.
type refusal struct {
	status int
	reason string
	msg    string
}

func (r *refusal) Error() string { return r.msg }

func refuse(status int, reason, format string, args ...any) *refusal {
	return &refusal{status: status, reason: reason, msg: fmt.Sprintf(format, args...)}
}

func (g *Gateway) record(d *decision) {
	verdict := "refused"
	if d.allowed {
		verdict = "allowed"
		g.m.duration.Observe(time.Since(d.began).Seconds())
	}
	g.m.conns.WithLabelValues(verdict, d.reason).Inc()
	g.m.bytes.WithLabelValues("out").Add(float64(d.out))
	g.m.bytes.WithLabelValues("in").Add(float64(d.in))
	attrs := []any{"verdict", verdict, "reason", d.reason, "from", d.from.String(), "method", d.method,
		"host", d.host, "port", d.port, "sni", d.sni, "bytes_out", d.out, "bytes_in", d.in, "duration_ms", time.Since(d.began).Milliseconds()}
	if d.addr.IsValid() {
		attrs = append(attrs, "addr", d.addr.String())
	}
	if s := d.src; s != nil {
		attrs = append(attrs, "pod", s.Pod, "pod_uid", string(s.UID), "image", s.Image, "request_id", s.RequestID)
	}
	if d.detail != "" {
		attrs = append(attrs, "detail", d.detail)
	}
	g.log.Info("egress", attrs...)
}

// serveConn judges one connection and, if it is allowed, carries it.
func (g *Gateway) serveConn(ctx context.Context, c net.Conn) {
	d := &decision{began: time.Now()}
	defer g.record(d)
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		d.from = ap.Addr().Unmap()
	}
	err := g.judge(ctx, c, d)
	var r *refusal
	if errors.As(err, &r) {
		d.reason, d.detail = r.reason, r.msg
		if r.status != 0 {
			writeRefusal(c, r)
		}
	}
}

func writeRefusal(c net.Conn, r *refusal) {
	_ = c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	body := "sandbox egress gateway: " + r.msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		r.status, http.StatusText(r.status), len(body), body)
}

// judge attributes the connection, reads its request, judges it, and
// carries an allowed one; the error is the refusal, or nil.
func (g *Gateway) judge(ctx context.Context, c net.Conn, d *decision) error {
	s, err := g.o.Sources.Source(d.from)
	if err != nil {
		return refuse(http.StatusForbidden, "unattributed", "connection from %s refused: %v", d.from, err)
	}
	d.src = s
	if n := s.conns.Add(1); n > int64(g.o.MaxConnsPerPod) {
		s.conns.Add(-1)
		return refuse(http.StatusTooManyRequests, "conn_limit", "tool pod %s already holds %d connections through the gateway, its bound", s.Pod, g.o.MaxConnsPerPod)
	}
	defer s.conns.Add(-1)
	if s.bytesOut.Load() >= g.o.MaxBytesOutPerPod {
		return refuse(http.StatusForbidden, "bytes_limit", "tool pod %s has sent its bound of %d bytes out", s.Pod, g.o.MaxBytesOutPerPod)
	}

	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	lim := &io.LimitedReader{R: c, N: maxHeader}
	br, hosts, err := readHead(bufio.NewReader(lim))
	if err != nil {
		return refuse(http.StatusBadRequest, "bad_request", "not an HTTP proxy request: %v", err)
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return refuse(http.StatusBadRequest, "bad_request", "not an HTTP proxy request: %v", err)
	}
	d.method = req.Method
	// Once lim is spent, what the client sends is read from c itself: br
	// first, then c, in order.
	cr := io.MultiReader(br, c)
	if req.Method == http.MethodConnect {
		return g.connect(ctx, c, cr, req, s, d)
	}
	if len(hosts) > 1 {
		return refuse(http.StatusBadRequest, "host_mismatch", "%d Host headers", len(hosts))
	}
	lim.N = 1 << 62 // the body is the server's to judge, the bytes-out bound to count
	host := ""
	if len(hosts) == 1 {
		host = hosts[0]
	}
	return g.plain(ctx, c, req, host, s, d)
}

// readHead reads a request's line and headers from br and returns a reader
// that gives them again, followed by the rest, and the Host headers, which
// http.ReadRequest drops in favour of the URL's host: the gateway compares
// the two.
func readHead(br *bufio.Reader) (*bufio.Reader, []string, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, nil, err
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, nil, err
	}
	var head bytes.Buffer
	head.WriteString(line + "\r\n")
	if err := http.Header(hdr).Write(&head); err != nil {
		return nil, nil, err
	}
	head.WriteString("\r\n")
	return bufio.NewReader(io.MultiReader(&head, br)), hdr.Values("Host"), nil
}

// target judges host:port for s: allowed by its list, resolved by the
// gateway, every answer public. It returns the addresses to dial.
func (g *Gateway) target(ctx context.Context, s *Source, host string, port int, d *decision) ([]netip.Addr, error) {
	if port < 1 || port > 65535 {
		return nil, refuse(http.StatusBadRequest, "bad_request", "port %d", port)
	}
	name := host
	ip, ipErr := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if ipErr == nil {
		name = ip.Unmap().String()
	} else {
		h, err := CanonicalHost(host)
		if err != nil {
			return nil, refuse(http.StatusBadRequest, "bad_request", "host %q: %v", host, err)
		}
		name = h
	}
	d.host, d.port = name, port
	allowed := s.Allow.Allows(name, port) || g.o.Weaken.Has(weaken.EgressAllowAll)
	if !allowed || g.o.Weaken.Has(weaken.EgressRefuseAll) {
		if ipErr == nil {
			return nil, refuse(http.StatusForbidden, "ip_literal", "%s is an address, and tool pod %s's list (%s) does not hold it: name the host", name, s.Pod, s.Allow)
		}
		return nil, refuse(http.StatusForbidden, "not_allowed", "%s port %d is not in tool pod %s's allow list (%s)", name, port, s.Pod, s.Allow)
	}
	addrs := []netip.Addr{ip}
	if ipErr != nil {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		var err error
		// Absolute: the pod's search domains must never turn a listed
		// name into a cluster one.
		addrs, err = g.o.Resolver.LookupNetIP(rctx, "ip", name+".")
		if err != nil || len(addrs) == 0 {
			return nil, refuse(http.StatusBadGateway, "resolve_failed", "cannot resolve %s: %v", name, err)
		}
	}
	// One answer that is not public refuses the name: a mix of public and
	// private answers is rebinding waiting for the dial to pick the latter.
	deny := g.o.Deny
	if g.o.Fenced != nil {
		deny = append(slices.Clone(deny), g.o.Fenced()...)
	}
	for _, a := range addrs {
		if why := refusedRange(a, g.o.Permit, deny); why != "" && !g.o.Weaken.Has(weaken.EgressRebind) {
			d.addr = netip.AddrPortFrom(a.Unmap(), uint16(port))
			return nil, refuse(http.StatusForbidden, "private_address", "%s resolves to %s, which is %s: refused", name, a.Unmap(), why)
		}
	}
	return addrs, nil
}

// open judges host:port for s and dials what it judged.
func (g *Gateway) open(ctx context.Context, s *Source, host string, port int, d *decision) (net.Conn, error) {
	addrs, err := g.target(ctx, s, host, port, d)
	if err != nil {
		return nil, err
	}
	return g.dial(ctx, addrs, port, d)
}

// dial connects to the first of addrs that answers: the addresses judged,
// never a second lookup.
func (g *Gateway) dial(ctx context.Context, addrs []netip.Addr, port int, d *decision) (net.Conn, error) {
	var last error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), uint16(port))
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		up, err := g.o.Dial(dctx, "tcp", ap.String())
		cancel()
		if err == nil {
			d.addr = ap
			return up, nil
		}
		last = err
	}
	return nil, refuse(http.StatusBadGateway, "dial_failed", "cannot connect to %s: %v", d.host, last)
}

// connect carries a CONNECT whose host is allowed and whose ClientHello
// names the same host.
func (g *Gateway) connect(ctx context.Context, c net.Conn, cr io.Reader, req *http.Request, s *Source, d *decision) error {
	host, portStr, err := net.SplitHostPort(req.RequestURI)
	if err != nil {
		return refuse(http.StatusBadRequest, "bad_request", "CONNECT %q: want host:port", req.RequestURI)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return refuse(http.StatusBadRequest, "bad_request", "CONNECT %q: port %q is not a number", req.RequestURI, portStr)
	}
	up, err := g.open(ctx, s, host, port, d)
	if err != nil {
		return err
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return refuse(0, "client_gone", "%v", err)
	}
	sni, hello, err := readHello(cr)
	if err != nil {
		return refuse(0, "not_tls", "the connection to %s:%d does not open with a TLS ClientHello (the gateway carries TLS only over CONNECT; send plain HTTP as a proxy request): %v", d.host, port, err)
	}
	d.sni = sni
	if !sniMatches(sni, d.host) && !g.o.Weaken.Has(weaken.EgressNoSNI) {
		return refuse(0, "sni_mismatch", "the ClientHello names %q, not %s, the host CONNECT named (domain fronting is refused)", sni, d.host)
	}
	_ = c.SetReadDeadline(time.Time{})
	if !s.spend(int64(len(hello)), g.o.MaxBytesOutPerPod) {
		return refuse(0, "bytes_limit", "tool pod %s reached its bound of %d bytes out", s.Pod, g.o.MaxBytesOutPerPod)
	}
	if _, err := up.Write(hello); err != nil {
		return refuse(0, "dial_failed", "write to %s: %v", d.addr, err)
	}
	d.out += int64(len(hello)) // what was read but refused never left
	d.allowed = true
	d.reason = g.pipe(c, cr, up, s, d)
	return nil
}

// sniMatches: a name CONNECT must be named by the hello; an address
// CONNECT (listed as one) must carry no other name.
func sniMatches(sni, host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return sni == ""
	}
	h, err := CanonicalHost(sni)
	return err == nil && h == host
}

// plain carries one HTTP request in the absolute form, judged by its host,
// and its answer; the connection closes after it, so that a second request
// on it cannot go elsewhere unjudged.
func (g *Gateway) plain(ctx context.Context, c net.Conn, req *http.Request, h string, s *Source, d *decision) error {
	u := req.URL
	if u.Scheme != "http" || u.Host == "" {
		return refuse(http.StatusBadRequest, "bad_request", "%s %s: a proxy request names an http:// URL (HTTPS goes through CONNECT)", req.Method, req.RequestURI)
	}
	if h != "" && !strings.EqualFold(strings.TrimSuffix(h, "."), strings.TrimSuffix(u.Host, ".")) {
		return refuse(http.StatusBadRequest, "host_mismatch", "Host %q differs from the request's URL host %q", h, u.Host)
	}
	host, port := u.Hostname(), PortHTTP
	if p := u.Port(); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil {
			return refuse(http.StatusBadRequest, "bad_request", "port %q is not a number", p)
		}
	}
	up, err := g.open(ctx, s, host, port, d)
	if err != nil {
		return err
	}
	defer up.Close()
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Keep-Alive", "Upgrade", "Te", "Trailer"} {
		req.Header.Del(h)
	}
	req.Close = true
	req.Host = u.Host
	_ = c.SetReadDeadline(time.Time{})
	cw := &countWriter{w: up, s: s, max: g.o.MaxBytesOutPerPod}
	if err := req.Write(cw); err != nil {
		d.out += cw.n
		if errors.Is(err, errBytesOut) {
			return refuse(0, "bytes_limit", "tool pod %s reached its bound of %d bytes out", s.Pod, g.o.MaxBytesOutPerPod)
		}
		return refuse(0, "client_gone", "request to %s: %v", d.addr, err)
	}
	d.out += cw.n
	d.allowed = true
	// The answer, until the server closes (the request asked it to).
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-s.gone:
			c.Close()
			up.Close()
		case <-done:
		}
	}()
	n, err := io.Copy(c, up)
	close(done)
	<-watched
	d.in += n
	d.reason = endReason(err, s)
	return nil
}

// errBytesOut ends a connection whose pod reached its bytes-out bound.
var errBytesOut = errors.New("bytes out bound reached")

// spend counts n bytes out for s, false once over max.
func (s *Source) spend(n, max int64) bool { return s.bytesOut.Add(n) <= max }

// countWriter counts bytes toward the pod's bound as they go out.
type countWriter struct {
	w   io.Writer
	s   *Source
	max int64
	n   int64
}

func (w *countWriter) Write(p []byte) (int, error) {
	if !w.s.spend(int64(len(p)), w.max) {
		return 0, errBytesOut
	}
	n, err := w.w.Write(p)
	w.n += int64(n)
	return n, err
}

// pipe copies both ways until both are done, the pod goes, or it reaches
// its bytes-out bound; it returns how the connection ended.
// cr is what is read from c: c, after what was read ahead of it.
func (g *Gateway) pipe(c net.Conn, cr io.Reader, up net.Conn, s *Source, d *decision) string {
	var (
		wg      sync.WaitGroup
		outErr  error
		out, in int64
	)
	stop, watched := make(chan struct{}), make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		cw := &countWriter{w: up, s: s, max: g.o.MaxBytesOutPerPod}
		_, outErr = io.Copy(cw, cr)
		out = cw.n
		if errors.Is(outErr, errBytesOut) {
			c.Close()
			up.Close()
			return
		}
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		in, _ = io.Copy(c, up)
		closeWrite(c)
	}()
	go func() {
		defer close(watched)
		select {
		case <-s.gone:
			c.Close()
			up.Close()
		case <-stop:
		}
	}()
	wg.Wait()
	close(stop)
	<-watched
	d.out += out
	d.in += in
	return endReason(outErr, s)
}

func endReason(err error, s *Source) string {
	select {
	case <-s.gone:
		return "pod_gone"
	default:
	}
	if errors.Is(err, errBytesOut) {
		return "bytes_limit"
	}
	return "done"
}

// closeWrite half-closes a TCP connection, so that the other side sees the
// end of one direction while the other still flows.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}
