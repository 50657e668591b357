package seal

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// startResolver serves a Resolver on a free loopback port until the test ends.
func startResolver(t *testing.T) string {
	t.Helper()
	r, err := ListenResolver("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return r.Addr()
}

// TestResolverAnswersAtOnce: every outside name is NXDOMAIN, over UDP and
// TCP, in well under the 100 ms a snippet may wait; localhost resolves.
func TestResolverAnswersAtOnce(t *testing.T) {
	addr := startResolver(t)
	for _, proto := range []string{"udp", "tcp"} {
		for _, tc := range []struct {
			name  string
			qtype uint16
			rcode int
			want  string
		}{
			{"c2VjcmV0.exfil.sandbox.test.", dns.TypeA, dns.RcodeNameError, ""},
			{"example.com.", dns.TypeAAAA, dns.RcodeNameError, ""},
			{"kubernetes.default.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
			{"localhost.", dns.TypeA, dns.RcodeSuccess, "127.0.0.1"},
			{"LocalHost.", dns.TypeAAAA, dns.RcodeSuccess, "::1"},
			{"db.localhost.", dns.TypeTXT, dns.RcodeSuccess, ""},
		} {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				q := new(dns.Msg)
				q.SetQuestion(tc.name, tc.qtype)
				cl := &dns.Client{Net: proto, Timeout: time.Second}
				start := time.Now()
				r, _, err := cl.Exchange(q, addr)
				took := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if r.Rcode != tc.rcode || r.Id != q.Id || !r.Response {
					t.Errorf("rcode %s id %d response %v, want %s for id %d", dns.RcodeToString[r.Rcode], r.Id, r.Response, dns.RcodeToString[tc.rcode], q.Id)
				}
				if took > 100*time.Millisecond {
					t.Errorf("answered in %s, want well under 100 ms", took)
				}
				var got string
				for _, rr := range r.Answer {
					switch a := rr.(type) {
					case *dns.A:
						got = a.A.String()
					case *dns.AAAA:
						got = a.AAAA.String()
					}
				}
				if got != tc.want {
					t.Errorf("answer %q, want %q", got, tc.want)
				}
			})
		}
	}
}

// TestResolverRefusesOtherOpcodes: an update or notify is not implemented,
// and a query of two questions is malformed.
func TestResolverRefusesOtherOpcodes(t *testing.T) {
	addr := startResolver(t)
	upd := new(dns.Msg)
	upd.SetUpdate("example.com.")
	two := new(dns.Msg)
	two.SetQuestion("a.example.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "b.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	for _, tc := range []struct {
		name string
		msg  *dns.Msg
		want int
	}{{"update", upd, dns.RcodeNotImplemented}, {"two questions", two, dns.RcodeFormatError}} {
		r, err := dns.Exchange(tc.msg, addr)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.Rcode != tc.want {
			t.Errorf("%s: rcode %s, want %s", tc.name, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.want])
		}
	}
}

// reuseListen binds addr with SO_REUSEADDR and SO_REUSEPORT set, as a
// snippet trying to share a port would.
func reuseListen(network, addr string) (io.Closer, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			if serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	if network == "udp" {
		return lc.ListenPacket(context.Background(), network, addr)
	}
	return lc.Listen(context.Background(), network, addr)
}

// soReusePort is SO_REUSEPORT on Linux; the syscall package of amd64 lacks
// the name.
const soReusePort = 0xf

// TestResolverHoldsItsPort: with the resolver bound, nothing else can bind
// its address, over UDP or TCP, not even with SO_REUSEADDR and
// SO_REUSEPORT (a snippet's way to share a port). The control: two sockets
// that both set them do share one, so the refusal is the resolver's doing.
func TestResolverHoldsItsPort(t *testing.T) {
	addr := startResolver(t)
	for _, network := range []string{"udp", "tcp"} {
		if c, err := reuseListen(network, addr); err == nil {
			c.Close()
			t.Errorf("a %s socket with SO_REUSEADDR and SO_REUSEPORT bound the resolver's address", network)
		}
		first, err := reuseListen(network, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var shared string
		switch f := first.(type) {
		case net.PacketConn:
			shared = f.LocalAddr().String()
		case net.Listener:
			shared = f.Addr().String()
		}
		second, err := reuseListen(network, shared)
		if err != nil {
			t.Errorf("control: two %s sockets that both set SO_REUSEPORT could not share %s: %v", network, shared, err)
		} else {
			second.Close()
		}
		first.Close()
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentUDP is a UDP socket that reads queries and never answers.
func silentUDP(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr().String()
}

// silentDial stands in for a path that drops packets: it never connects.
func silentDial(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestProof(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	answering := startResolver(t) // answers NXDOMAIN: a reply all the same
	const bound = 150 * time.Millisecond
	for _, tc := range []struct {
		name    string
		targets []Target
		dial    func(context.Context, string, string) (net.Conn, error)
		sealed  bool
		what    []string
	}{
		// The positive control: a path that is open is never taken as cut.
		{"tcp open", []Target{{Kind: TCP, Addr: open.Addr().String()}}, nil, false, []string{"connected"}},
		{"dns answered", []Target{{Kind: DNS, Addr: answering}}, nil, false, []string{"answered NXDOMAIN"}},
		{"tcp refused", []Target{{Kind: TCP, Addr: closedPort(t)}}, nil, true, []string{"refused"}},
		{"tcp silent", []Target{{Kind: TCP, Addr: "192.0.2.1:443"}}, silentDial, true, []string{"no answer within 150ms"}},
		{"dns silent", []Target{{Kind: DNS, Addr: silentUDP(t)}}, nil, true, []string{"no answer within 150ms"}},
		{"one open among cut", []Target{{Kind: TCP, Addr: closedPort(t)}, {Kind: DNS, Addr: answering}}, nil, false,
			[]string{"refused", "answered NXDOMAIN"}},
		{"both cut", []Target{{Kind: TCP, Addr: closedPort(t)}, {Kind: DNS, Addr: silentUDP(t)}}, nil, true,
			[]string{"refused", "no answer"}},
		{"no target proves nothing", nil, nil, false, nil},
		{"bad address proves nothing", []Target{{Kind: TCP, Addr: "no-port"}}, nil, false, []string{"proves nothing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Prover{Targets: tc.targets, Bound: bound, Dial: tc.dial}
			start := time.Now()
			c := p.Check(context.Background())
			if took := time.Since(start); took > bound+time.Second {
				t.Errorf("check took %s, bound %s", took, bound)
			}
			if c.Sealed != tc.sealed {
				t.Errorf("sealed = %v, want %v: %s", c.Sealed, tc.sealed, c.Evidence())
			}
			for i, w := range tc.what {
				if !strings.Contains(c.Outcomes[i].What, w) {
					t.Errorf("outcome %d = %q, want %q", i, c.Outcomes[i].What, w)
				}
			}
		})
	}
}

// TestGuard: unproven while the path is open, proven (and Wait returns at
// once) when it is cut, and unproven again when it opens.
func TestGuard(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	var flips []bool
	g := NewGuard(Prover{Targets: []Target{{Kind: TCP, Addr: addr}}, Bound: 100 * time.Millisecond},
		func(c Check) { flips = append(flips, c.Sealed) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if c, ok := g.Wait(ctx, 3*RetryInterval); ok {
		t.Fatalf("proven while the path is open: %s", c.Evidence())
	}
	if g.Sealed(time.Now()) {
		t.Fatal("Sealed while the path is open")
	}
	ln.Close() // the path is cut: connections are refused
	start := time.Now()
	c, ok := g.Wait(ctx, 5*time.Second)
	if !ok {
		t.Fatalf("not proven after the path was cut: %s", c.Evidence())
	}
	if took := time.Since(start); took > RetryInterval+time.Second {
		t.Errorf("proof took %s after the cut", took)
	}
	if !g.Sealed(time.Now()) || g.Sealed(time.Now().Add(MaxAge)) {
		t.Error("Sealed does not follow the proof's age")
	}
	// The path opens again: the next recheck sees it.
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("could not listen on %s again: %v", addr, err)
	}
	defer ln2.Close()
	deadline := time.Now().Add(RecheckInterval + 2*time.Second)
	for g.Sealed(time.Now()) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if g.Sealed(time.Now()) {
		t.Error("still Sealed after the path opened again")
	}
	cancel()
	<-done
	if len(flips) != 3 || flips[0] || !flips[1] || flips[2] {
		t.Errorf("verdict changes %v, want [false true false]", flips)
	}
}

func TestResolvConf(t *testing.T) {
	rc := ParseResolvConf([]byte("# kubelet\nsearch sandbox.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\nnameserver 127.0.0.53\noptions ndots:5\n"))
	if d := rc.ClusterDomain(); d != "cluster.local" {
		t.Errorf("domain %q", d)
	}
	ts := rc.DNSTargets("kubernetes.default.svc.cluster.local.")
	if len(ts) != 1 || ts[0].Addr != "10.96.0.10:53" || ts[0].Kind != DNS {
		t.Errorf("targets %+v: the loopback resolver is no path out", ts)
	}
	if d := ParseResolvConf([]byte("nameserver 1.1.1.1\n")).ClusterDomain(); d != "" {
		t.Errorf("domain %q without a search list", d)
	}
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	if a := APIServerAddr(func(k string) string { return env[k] }); a != "10.96.0.1:443" {
		t.Errorf("api server %q", a)
	}
	if a := APIServerAddr(func(string) string { return "" }); a != "" {
		t.Errorf("api server %q outside a cluster", a)
	}
}

// TestResolverAnyPortTaken: when the port UDP was given is some TCP
// socket's already, port 0 tries another; a port asked for is not
// changed.
func TestResolverAnyPortTaken(t *testing.T) {
	var taken []string
	listenTCP = func(network, addr string) (net.Listener, error) {
		if len(taken) < 2 {
			taken = append(taken, addr)
			return nil, &net.OpError{Op: "listen", Net: network, Err: syscall.EADDRINUSE}
		}
		return net.Listen(network, addr)
	}
	defer func() { listenTCP = net.Listen }()

	r, err := ListenResolver("127.0.0.1:0")
	if err != nil {
		t.Fatalf("port 0 with two ports taken: %v", err)
	}
	r.udp.PacketConn.Close()
	r.tcp.Listener.Close()
	if len(taken) != 2 {
		t.Errorf("tried %v before binding %s, want two ports", taken, r.Addr())
	}

	taken = nil
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fixed := pc.LocalAddr().String()
	pc.Close()
	if _, err := ListenResolver(fixed); !errors.Is(err, syscall.EADDRINUSE) || len(taken) != 1 {
		t.Errorf("a port asked for, taken: %v after %d tries, want EADDRINUSE after 1", err, len(taken))
	}
}

// TestICMPNoSocketIsCut: a pod whose ping_group_range is empty cannot open
// an echo socket; the kernel's EACCES is a cut path.
func TestICMPNoSocketIsCut(t *testing.T) {
	p := Prover{ListenICMP: func(string) (net.PacketConn, error) {
		return nil, &net.OpError{Op: "listen", Net: "udp4", Err: os.NewSyscallError("socket", syscall.EACCES)}
	}}
	c := p.Check(context.Background())
	if len(c.Outcomes) != 0 {
		t.Fatalf("no targets: got %v", c.Outcomes)
	}
	p.Targets = []Target{{Kind: ICMP, Addr: "192.0.2.1"}}
	c = p.Check(context.Background())
	if !c.Sealed || !strings.Contains(c.Evidence(), "no ICMP socket") {
		t.Fatalf("refused socket: sealed %v, %s", c.Sealed, c.Evidence())
	}
}
