package netsec

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func python(t *testing.T) string {
	t.Helper()
	p, err := osexec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH")
	}
	return p
}

// TestProbeAgainstCanary runs the real probe against the real canary on
// loopback: what answers is reached, what does not is not, and the parser
// reads the probe's own output.
func TestProbeAgainstCanary(t *testing.T) {
	py := python(t)
	httpPort, dnsPort, closed := freePort(t), freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	canary := osexec.CommandContext(ctx, py, "-c", canaryScript)
	canary.Env = append(os.Environ(), "CANARY_TOKEN=tok123",
		fmt.Sprintf("CANARY_HTTP_PORT=%d", httpPort), fmt.Sprintf("CANARY_DNS_PORT=%d", dnsPort))
	var canaryErr bytes.Buffer
	canary.Stderr = &canaryErr
	if err := canary.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = canary.Wait() }()
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			t.Fatalf("canary never listened: %s", canaryErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	targets := []Target{
		{Name: "http", Kind: HTTP, Host: "127.0.0.1", Port: httpPort, Token: "tok123", DeadlineS: 3},
		{Name: "http-wrong-token", Kind: HTTP, Host: "127.0.0.1", Port: httpPort, Token: "other", DeadlineS: 0.5},
		{Name: "tcp", Kind: TCP, Host: "127.0.0.1", Port: httpPort, DeadlineS: 3},
		{Name: "closed", Kind: TCP, Host: "127.0.0.1", Port: closed, DeadlineS: 0.6},
		{Name: "udp", Kind: DNSUDP, Host: "127.0.0.1", Port: dnsPort, QName: "kubernetes.default.svc.cluster.local", DeadlineS: 3},
		{Name: "dnstcp", Kind: DNSTCP, Host: "127.0.0.1", Port: dnsPort, QName: "kubernetes.default.svc.cluster.local", Token: CanaryDNSAnswer, DeadlineS: 3},
		{Name: "dns-wrong-answer", Kind: DNSUDP, Host: "127.0.0.1", Port: dnsPort, QName: "x.example", Token: "192.0.2.99", DeadlineS: 0.5},
		{Name: "udp-closed", Kind: DNSUDP, Host: "127.0.0.1", Port: closed, QName: "x.example", DeadlineS: 0.6},
		{Name: "resolve", Kind: Resolve, QName: "localhost", Token: "127.0.0.1", DeadlineS: 2},
		{Name: "resolve-wrong-answer", Kind: Resolve, QName: "localhost", Token: "192.0.2.99", DeadlineS: 2},
	}
	probe := osexec.Command(py, "-")
	probe.Stdin = strings.NewReader(Script(targets))
	out, err := probe.Output()
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	rep, err := Parse(string(out))
	if err != nil {
		t.Fatal(err)
	}
	byName := rep.Outcomes
	for _, name := range []string{"http", "tcp", "udp", "dnstcp", "resolve"} {
		if !ControlOK(targets[idx(targets, name)], byName[name]) {
			t.Errorf("%s: want reached, got %s", name, byName[name].Describe())
		}
	}
	if !byName["http"].Token {
		t.Errorf("http: token not seen: %s", byName["http"].Describe())
	}
	if byName["http-wrong-token"].Token || ControlOK(targets[1], byName["http-wrong-token"]) {
		t.Errorf("wrong token counted as the canary: %s", byName["http-wrong-token"].Describe())
	}
	if !byName["dnstcp"].Token {
		t.Errorf("dnstcp: canary answer not recognised: %s", byName["dnstcp"].Describe())
	}
	if o := byName["dns-wrong-answer"]; ControlOK(targets[idx(targets, "dns-wrong-answer")], o) || o.Attempts < 2 {
		t.Errorf("a DNS answer without the expected address counted: %s", o.Describe())
	}
	if o := byName["resolve"]; !o.Token || o.Attempts != 1 || !strings.Contains(o.Detail, "127.0.0.1") {
		t.Errorf("resolve localhost: %s", o.Describe())
	}
	if o := byName["resolve-wrong-answer"]; ControlOK(targets[idx(targets, "resolve-wrong-answer")], o) {
		t.Errorf("a lookup without the canary zone's answer counted: %s", o.Describe())
	}
	if got := byName["udp"].Addrs; len(got) != 1 || got[0] != CanaryDNSAnswer {
		t.Errorf("udp answer %v, want [%s]", got, CanaryDNSAnswer)
	}
	for _, name := range []string{"closed", "udp-closed"} {
		o := byName[name]
		if o.Reached || o.Attempts < 2 || !strings.Contains(o.Error, "ConnectionRefused") {
			t.Errorf("%s: want refused over several attempts, got %s", name, o.Describe())
		}
	}
}

func idx(ts []Target, name string) int {
	for i, t := range ts {
		if t.Name == name {
			return i
		}
	}
	return -1
}

func TestCompareBlocked(t *testing.T) {
	canary := Target{Name: "c", Kind: HTTP, Token: "tok"}
	reachedTok := &Outcome{Kind: HTTP, Reached: true, Answered: true, Token: true, Attempts: 1}
	reachedNoTok := &Outcome{Kind: HTTP, Reached: true, Answered: true, Attempts: 1}
	refused := &Outcome{Kind: HTTP, Attempts: 12, Error: "ConnectionRefusedError(111)"}
	for _, tc := range []struct {
		name             string
		target           Target
		control, sandbox *Outcome
		want             Finding
	}{
		{"control reached, sandbox blocked", canary, reachedTok, refused, Blocked},
		{"control failed", canary, refused, refused, ControlMissed},
		{"control reached something else", canary, reachedNoTok, refused, ControlMissed},
		{"control missing", canary, nil, refused, ControlMissed},
		{"sandbox reached", canary, reachedTok, reachedNoTok, SandboxReached},
		{"sandbox reached, control failed", canary, refused, reachedNoTok, SandboxReached},
		{"sandbox answer missing", canary, reachedTok, nil, SandboxBroken},
		{"sandbox never tried", canary, reachedTok, &Outcome{}, SandboxBroken},
		{"sandbox skipped its own address", canary, reachedTok, &Outcome{Skipped: "own address", Attempts: 0}, SandboxBroken},
		{"tcp target: handshake is enough for the control", Target{Kind: TCP}, &Outcome{Kind: TCP, Reached: true, Attempts: 1}, refused, Blocked},
		{"dns target: connect without reply is not a control", Target{Kind: DNSTCP}, &Outcome{Kind: DNSTCP, Reached: true, Attempts: 1}, refused, ControlMissed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CompareBlocked(tc.target, tc.control, tc.sandbox); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for name, out := range map[string]string{
		"empty":        "",
		"spaces":       " \n ",
		"traceback":    "Traceback (most recent call last):\n  ...\nOSError",
		"other json":   `{"probe":"inside"}`,
		"truncated":    `{"probe":"net","results":[{"name":"x"`,
		"no results":   `{"probe":"net"}`,
		"nameless row": `{"probe":"net","results":[{"reached":true}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if rep, err := Parse(out); err == nil {
				t.Errorf("parsed %q as %+v", out, rep)
			}
		})
	}
	rep, err := Parse("noise\n" + `{"probe":"net","hostname":"p","results":[{"name":"a","reached":true,"attempts":1,"errors":{"x":2}}]}` + "\n")
	if err != nil || !rep.Outcomes["a"].Reached || rep.Outcomes["a"].Errors["x"] != 2 {
		t.Fatalf("good answer: %+v, %v", rep, err)
	}
}

// TestProbeICMP runs the probe's echo in network namespaces of its own
// (unshare, as root), the kernel deciding: with the range a container
// runtime opens to every group the echo to loopback comes back with its
// payload; with the sandbox pods' empty range the socket is refused and
// nothing is reached.
func TestProbeICMP(t *testing.T) {
	py := python(t)
	unshare, err := osexec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare for network namespaces of its own")
	}
	targets := []Target{{Name: "echo", Kind: ICMP, Host: "127.0.0.1", DeadlineS: 1}}
	for _, tc := range []struct {
		rng     string
		reached bool
	}{{"0 2147483647", true}, {"1 0", false}} {
		sh := fmt.Sprintf("echo %q > /proc/sys/net/ipv4/ping_group_range && python3 -c 'import fcntl,socket,struct; s=socket.socket(); fcntl.ioctl(s, 0x8914, struct.pack(\"16sh\", b\"lo\", 1))' && exec %s -", tc.rng, py)
		probe := osexec.Command(unshare, "--net", "sh", "-c", sh)
		probe.Stdin = strings.NewReader(Script(targets))
		out, err := probe.Output()
		if err != nil {
			t.Fatalf("range %q: probe: %v: %s", tc.rng, err, out)
		}
		rep, err := Parse(string(out))
		if err != nil {
			t.Fatal(err)
		}
		o := rep.Outcomes["echo"]
		if ControlOK(targets[0], o) != tc.reached || o.Reached != tc.reached {
			t.Errorf("range %q: %s, want reached %v", tc.rng, o.Describe(), tc.reached)
		}
		if !tc.reached && !strings.Contains(o.Error, "PermissionError") {
			t.Errorf("range %q: error %q, want the socket refused", tc.rng, o.Error)
		}
	}
}
