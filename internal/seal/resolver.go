// Package seal is a sandbox pod's network seal as seen from inside the pod:
// the resolver a sealed snippet pod uses, which answers every name at once
// without a query leaving the pod, and the proof, before the pod is Ready
// and again while it waits for its job, that the pod's egress is cut.
package seal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// ResolverAddr is where a sealed pod's runner answers DNS: the pod's
// /etc/resolv.conf names 127.0.0.1, and resolv.conf has no port syntax, so
// it is port 53 (bound as non-root through UnprivilegedPortStart).
const ResolverAddr = "127.0.0.1:53"

// UnprivilegedPortStart is the sealed pod's net.ipv4.ip_unprivileged_port_start:
// the lowest port a process without CAP_NET_BIND_SERVICE may bind. 53 lets
// the runner bind ResolverAddr as non-root and leaves every port below it
// privileged. The sysctl is namespaced per pod and in Kubernetes' safe set,
// so Pod Security "restricted" admits it.
const (
	UnprivilegedPortSysctl = "net.ipv4.ip_unprivileged_port_start"
	UnprivilegedPortStart  = "53"
)

// resolverTimeout bounds reading a query and writing its answer: a client
// that stalls a TCP connection must not keep a goroutine of the runner.
const resolverTimeout = 2 * time.Second

// anyPortAttempts is how many ports ListenResolver tries for port 0.
const anyPortAttempts = 10

// listenTCP is net.Listen; the tests make a port look taken.
var listenTCP = net.Listen

// Resolver answers DNS over UDP and TCP on one address: NXDOMAIN for every
// name, except that localhost names resolve to the loopback addresses
// (RFC 6761). Nothing is forwarded, so no lookup a snippet makes can carry
// data out of the pod, and a failed lookup fails in microseconds rather
// than timing out. Its sockets are bound by ListenResolver, before the pod
// can run any snippet, without SO_REUSEPORT: a snippet cannot bind the same
// address beside it.
type Resolver struct {
	udp, tcp *dns.Server
	addr     string
}

// ListenResolver binds addr (host:port) for UDP and TCP; Serve answers on
// the bound sockets.
func ListenResolver(addr string) (*Resolver, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("resolver: %w", err)
	}
	var (
		pc net.PacketConn
		ln net.Listener
	)
	// TCP on the same port as UDP, also when addr asked for port 0: the
	// port UDP was given may be some TCP socket's already, so any port is
	// tried a few times.
	for attempt := 1; ; attempt++ {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return nil, fmt.Errorf("resolver: %w", err)
		}
		if ln, err = listenTCP("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if port != "0" || attempt == anyPortAttempts || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("resolver: %w", err)
		}
	}
	h := dns.HandlerFunc(answer)
	return &Resolver{
		udp:  &dns.Server{PacketConn: pc, Handler: h, ReadTimeout: resolverTimeout, WriteTimeout: resolverTimeout},
		tcp:  &dns.Server{Listener: ln, Handler: h, ReadTimeout: resolverTimeout, WriteTimeout: resolverTimeout},
		addr: pc.LocalAddr().String(),
	}, nil
}

// Addr is the bound address (the same port for UDP and TCP).
func (r *Resolver) Addr() string { return r.addr }

// Serve answers until ctx ends, then shuts both servers down and returns
// nil; it returns early with an error when a server fails.
func (r *Resolver) Serve(ctx context.Context) error {
	servers := []*dns.Server{r.udp, r.tcp}
	errs := make(chan error, len(servers))
	started := make(chan struct{}, len(servers))
	var wg sync.WaitGroup
	for _, s := range servers {
		s.NotifyStartedFunc = func() { started <- struct{}{} }
		wg.Go(func() { errs <- s.ActivateAndServe() })
	}
	// Shutdown refuses a server that has not started yet, which would then
	// serve for ever: wait for both (or a failure) first.
	var err error
	for range servers {
		select {
		case <-started:
		case err = <-errs:
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		select {
		case <-ctx.Done():
		case err = <-errs:
		}
	}
	for _, s := range servers {
		_ = s.Shutdown() // an error only says it already stopped
	}
	// A server that failed to start is not shut down by Shutdown; closing
	// its socket ends it either way.
	_ = r.udp.PacketConn.Close()
	_ = r.tcp.Listener.Close()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("resolver: %w", err)
	}
	return nil
}

// Close releases the sockets of a Resolver that will not Serve.
func (r *Resolver) Close() {
	_ = r.udp.PacketConn.Close()
	_ = r.tcp.Listener.Close()
}

// answer is the whole resolver: one reply per query, from memory.
func answer(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	switch {
	case req.Opcode != dns.OpcodeQuery:
		m.SetRcode(req, dns.RcodeNotImplemented)
	case len(req.Question) != 1:
		m.SetRcode(req, dns.RcodeFormatError)
	default:
		q := req.Question[0]
		if isLocalhost(q.Name) {
			m.SetReply(req)
			m.Answer = localhost(q)
		} else {
			m.SetRcode(req, dns.RcodeNameError)
		}
	}
	// Stub resolvers treat a reply without recursion as a lame server and
	// may try the next one; there is no next one, but say it plainly.
	m.RecursionAvailable = true
	_ = w.WriteMsg(m) // a client gone away is not ours to report
}

func isLocalhost(name string) bool {
	n := strings.ToLower(dns.Fqdn(name))
	return n == "localhost." || strings.HasSuffix(n, ".localhost.")
}

func localhost(q dns.Question) []dns.RR {
	hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0}
	switch q.Qtype {
	case dns.TypeA:
		hdr.Rrtype = dns.TypeA
		return []dns.RR{&dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 1)}}
	case dns.TypeAAAA:
		hdr.Rrtype = dns.TypeAAAA
		return []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: net.IPv6loopback}}
	}
	return nil
}
