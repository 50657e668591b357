package seal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Timing of the proof.
const (
	// Bound is how long a target may take to answer before its silence
	// counts as a cut path. On an open path inside a cluster a TCP handshake
	// or a DNS answer takes a few milliseconds; a cut path either refuses at
	// once (kube-router rejects) or never answers (engines that drop), and
	// only the latter costs the bound.
	Bound = 500 * time.Millisecond
	// RetryInterval spaces the attempts while the path is still open: a new
	// pod's NetworkPolicy is programmed a second or so after it starts. It is
	// a retry interval only, never taken as proof of anything.
	RetryInterval = 200 * time.Millisecond
	// RecheckInterval spaces the proofs once sealed, while the pod waits
	// for its job: a policy deleted or an engine stopped later shows within
	// about this long.
	RecheckInterval = time.Second
	// MaxAge is how old the last proof may be when a job arrives: older,
	// and the runner refuses the job rather than run it unproven.
	MaxAge = RecheckInterval + 2*Bound + time.Second
	// ReadyWait is how long the runner holds a readiness request that
	// arrives before the proof, answering the moment the proof is in: the
	// kubelet probes once a second, and the wait lets a proof that lands
	// between two probes count at once. It stays below ProbeTimeoutSeconds.
	ReadyWait = 800 * time.Millisecond
	// ProbeTimeoutSeconds is the readiness probe's timeout in the pod spec.
	ProbeTimeoutSeconds = 1
	// GiveUp is how long a runner waits, unproven, before it ends with the
	// evidence as its last words: a NetworkPolicy engine programs a new pod
	// within seconds, and one that has not in this long is not enforcing.
	// The pod's status then tells serve why even where serve cannot reach
	// the pod (an engine that stopped leaves serve's own rules behind, which
	// do not know the new pod).
	GiveUp = 30 * time.Second
)

// ProbeName is the name a DNS target is asked when none is given: one a
// cluster DNS answers itself, at once, rather than forwarding it.
const ProbeName = "kubernetes.default.svc.cluster.local."

// Kind is how a target is probed.
type Kind string

// The kinds of target.
const (
	// TCP: a handshake that completes means the path is open.
	TCP Kind = "tcp"
	// DNS: an A query over UDP for Name; any reply, whatever its code,
	// means the path is open.
	DNS Kind = "dns"
	// ICMP: an echo request to Addr (an address, no port); the echo
	// answered means the path is open.
	ICMP Kind = "icmp"
)

// Target is one address the pod must not reach.
type Target struct {
	Kind Kind
	Addr string // host:port; the address alone for ICMP
	Name string // DNS only; "" asks ProbeName
}

func (t Target) String() string { return string(t.Kind) + " " + t.Addr }

// Outcome is what one probe of one target saw.
type Outcome struct {
	Target Target
	// Cut is true when the target refused, was unreachable or stayed silent
	// for the whole Bound.
	Cut  bool
	Took time.Duration
	What string // "refused", "no answer within 500ms", "connected", "answered NOERROR", an error
}

func (o Outcome) String() string {
	return fmt.Sprintf("%s %s in %d ms", o.Target, o.What, o.Took.Milliseconds())
}

// Check is one proof attempt over every target.
type Check struct {
	// Sealed is true when every target was cut (and there was at least one).
	Sealed   bool
	At       time.Time
	Outcomes []Outcome
}

// Evidence says what the check saw, one target after another.
func (c Check) Evidence() string {
	if len(c.Outcomes) == 0 {
		return "no target to prove the seal against"
	}
	parts := make([]string, len(c.Outcomes))
	for i, o := range c.Outcomes {
		parts[i] = o.String()
	}
	return strings.Join(parts, "; ")
}

// Prover probes targets that a sealed pod cannot reach.
type Prover struct {
	Targets []Target
	// Bound is each target's time to answer; 0 means Bound.
	Bound time.Duration
	// Dial connects for TCP targets (tests swap it); nil dials for real.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ListenICMP opens ICMP targets' sockets (tests swap it); nil opens
	// real ones.
	ListenICMP ListenICMP
}

// Check probes every target at once and says whether all were cut.
func (p Prover) Check(ctx context.Context) Check {
	c := Check{At: time.Now(), Outcomes: make([]Outcome, len(p.Targets))}
	var wg sync.WaitGroup
	for i, t := range p.Targets {
		wg.Go(func() { c.Outcomes[i] = p.probe(ctx, t) })
	}
	wg.Wait()
	c.Sealed = len(c.Outcomes) > 0
	for _, o := range c.Outcomes {
		c.Sealed = c.Sealed && o.Cut
	}
	return c
}

func (p Prover) bound() time.Duration {
	if p.Bound > 0 {
		return p.Bound
	}
	return Bound
}

func (p Prover) probe(ctx context.Context, t Target) Outcome {
	ctx, cancel := context.WithTimeout(ctx, p.bound())
	defer cancel()
	start := time.Now()
	var o Outcome
	switch t.Kind {
	case TCP:
		o = p.probeTCP(ctx, t)
	case DNS:
		o = p.probeDNS(ctx, t)
	case ICMP:
		o = p.probeICMP(ctx, t)
	default:
		o = Outcome{What: fmt.Sprintf("unknown kind %q", t.Kind)}
	}
	o.Target, o.Took = t, time.Since(start)
	return o
}

func (p Prover) probeTCP(ctx context.Context, t Target) Outcome {
	dial := p.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", t.Addr)
	if err == nil {
		conn.Close()
		return Outcome{What: "connected"}
	}
	return p.judge(ctx, err)
}

func (p Prover) probeDNS(ctx context.Context, t Target) Outcome {
	name := t.Name
	if name == "" {
		name = ProbeName
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	cl := &dns.Client{Net: "udp", Timeout: p.bound()}
	r, _, err := cl.ExchangeContext(ctx, q, t.Addr)
	if err == nil {
		return Outcome{What: "answered " + dns.RcodeToString[r.Rcode]}
	}
	return p.judge(ctx, err)
}

// judge turns a failed probe into an outcome: refused, unreachable and
// silent paths are cut; any other failure proves nothing, and so counts as
// open.
func (p Prover) judge(ctx context.Context, err error) Outcome {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Outcome{Cut: true, What: "refused"}
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Outcome{Cut: true, What: "unreachable"}
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		// A local filter (iptables OUTPUT) refusing the packet.
		return Outcome{Cut: true, What: "refused by a local filter"}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Outcome{What: "not probed: " + ctx.Err().Error()}
		}
		return Outcome{Cut: true, What: fmt.Sprintf("no answer within %s", p.bound())}
	}
	return Outcome{What: "error (proves nothing): " + err.Error()}
}
