// Package netsec holds the network probes of `sandbox verify`: the Python
// probe that runs unchanged in a sandbox pod and in an unrestricted control
// pod, the canary those probes aim at, and the rule that turns a
// control/sandbox pair of outcomes into a finding. A block only counts when
// the control reached the same target in the same run.
package netsec

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

//go:embed netprobe.py
var netprobe string

// Kind is how a target is probed.
type Kind string

// The probe kinds.
const (
	// HTTP connects, sends GET and reads the answer; a Token in the body
	// proves the answer came from our canary.
	HTTP Kind = "http"
	// TCP only completes a handshake (TLS ports: API server, kubelet).
	TCP Kind = "tcp"
	// DNSUDP and DNSTCP send an A query for QName and parse the reply.
	DNSUDP Kind = "dns-udp"
	DNSTCP Kind = "dns-tcp"
	// Resolve looks QName up once through the probing pod's own resolver
	// (getaddrinfo), as any program in it would; Token, when set, must be
	// among the addresses for the answer to count as the canary zone's.
	Resolve Kind = "resolve"
	// ICMP sends an echo request with a random payload through an
	// unprivileged ICMP socket (Port unused); a reach is the payload echoed.
	ICMP Kind = "icmp"
)

// Gateway6 as a Target's Host means the probing pod's IPv6 default gateway
// (a link-local address on its interface).
const Gateway6 = "@gw6"

// ResolvConf as a Target's Host means the first nameserver of the probing
// pod's /etc/resolv.conf.
const ResolvConf = "@resolv"

// Target is one address a probe tries, again and again until it gets a full
// answer or its deadline passes.
type Target struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	Host string `json:"host"`
	Port int    `json:"port"`
	Path string `json:"path,omitempty"`
	// Token must be in an HTTP answer's body, or among a DNS answer's A
	// records, for a reach to count as our canary's.
	Token string `json:"token,omitempty"`
	QName string `json:"qname,omitempty"`
	// SkipSelf skips the target when Host is the probing pod's own address
	// (a sandbox reaching itself proves nothing).
	SkipSelf bool `json:"skip_self,omitempty"`
	// DeadlineS bounds the attempts; IntervalS spaces them.
	DeadlineS float64 `json:"deadline_s"`
	IntervalS float64 `json:"interval_s,omitempty"`
}

// Addr is host:port for evidence (the host alone for ICMP).
func (t Target) Addr() string {
	if t.Kind == ICMP {
		return t.Host
	}
	if strings.Contains(t.Host, ":") {
		return fmt.Sprintf("[%s]:%d", t.Host, t.Port)
	}
	return fmt.Sprintf("%s:%d", t.Host, t.Port)
}

// Script returns the Python program probing targets: the same text runs in
// the sandbox (as the snippet's code) and in the control (python3 -).
func Script(targets []Target) string {
	p, err := json.Marshal(map[string]any{"targets": targets})
	if err != nil {
		panic(fmt.Sprintf("netsec: marshal targets: %v", err)) // plain structs always marshal
	}
	return "PARAMS_B64 = \"" + base64.StdEncoding.EncodeToString(p) + "\"\n" + netprobe
}

// Outcome is what one probe run saw at one target.
type Outcome struct {
	Name     string
	Kind     Kind
	Host     string
	Port     int
	Reached  bool // TCP handshake completed, or a DNS reply to our query
	Answered bool // an HTTP status line or a parsed DNS reply
	Token    bool // the canary's token was in the HTTP body
	Skipped  string
	Attempts int
	// ReachedMS is when the first reach happened; ElapsedMS how long the probe spent.
	ReachedMS int64
	ElapsedMS int64
	Error     string         // the last error
	Errors    map[string]int // every distinct error and how often
	Detail    string         // status line, DNS rcode and addresses
	Addrs     []string
	RCode     int
	// LookupMS is how long a Resolve lookup took to succeed or fail.
	LookupMS int64
}

// Report is one probe run's answer.
type Report struct {
	Hostname  string
	Self      []string
	Resolvers []string
	UID       int
	Outcomes  map[string]*Outcome
}

// Parse reads the probe's JSON line out of stdout. Anything but one
// well-formed answer is an error: the caller turns it into FAIL, never PASS.
func Parse(stdout string) (*Report, error) {
	line, err := LastJSONLine(stdout, "probe", "net")
	if err != nil {
		return nil, err
	}
	j := gjson.Parse(line)
	rep := &Report{
		Hostname: j.Get("hostname").String(),
		UID:      int(j.Get("uid").Int()),
		Outcomes: map[string]*Outcome{},
	}
	for _, s := range j.Get("self").Array() {
		rep.Self = append(rep.Self, s.String())
	}
	for _, s := range j.Get("resolvers").Array() {
		rep.Resolvers = append(rep.Resolvers, s.String())
	}
	results := j.Get("results")
	if !results.IsArray() {
		return nil, fmt.Errorf("probe answer has no results array")
	}
	for _, r := range results.Array() {
		o := &Outcome{
			Name:      r.Get("name").String(),
			Kind:      Kind(r.Get("kind").String()),
			Host:      r.Get("host").String(),
			Port:      int(r.Get("port").Int()),
			Reached:   r.Get("reached").Bool(),
			Answered:  r.Get("answered").Bool(),
			Token:     r.Get("token").Bool(),
			Skipped:   r.Get("skipped").String(),
			Attempts:  int(r.Get("attempts").Int()),
			ReachedMS: r.Get("reached_ms").Int(),
			ElapsedMS: r.Get("elapsed_ms").Int(),
			Error:     r.Get("error").String(),
			Detail:    r.Get("detail").String(),
			RCode:     int(r.Get("rcode").Int()),
			LookupMS:  r.Get("lookup_ms").Int(),
			Errors:    map[string]int{},
		}
		if o.Name == "" {
			return nil, fmt.Errorf("probe answer has a result without a name")
		}
		r.Get("errors").ForEach(func(k, v gjson.Result) bool {
			o.Errors[k.String()] = int(v.Int())
			return true
		})
		for _, a := range r.Get("addrs").Array() {
			o.Addrs = append(o.Addrs, a.String())
		}
		rep.Outcomes[o.Name] = o
	}
	return rep, nil
}

// LastJSONLine returns the last line of out that is a JSON object whose key
// has the given value: snippets print exactly one such line, and anything a
// snippet printed before it is ignored.
func LastJSONLine(out, key, value string) (string, error) {
	if strings.TrimSpace(out) == "" {
		return "", fmt.Errorf("empty answer")
	}
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "{") || !gjson.Valid(l) {
			continue
		}
		if gjson.Get(l, key).String() == value {
			return l, nil
		}
	}
	return "", fmt.Errorf("no JSON line with %s=%q in %d bytes of output: %q", key, value, len(out), clip(out, 200))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Describe says in a few words what an outcome saw, for evidence.
func (o *Outcome) Describe() string {
	if o == nil {
		return "no answer"
	}
	if o.Skipped != "" {
		return "skipped (" + o.Skipped + ")"
	}
	var b strings.Builder
	switch {
	case o.Kind == Resolve && o.Token:
		fmt.Fprintf(&b, "resolved to the canary zone's own answer")
	case o.Kind == Resolve && o.Answered:
		fmt.Fprintf(&b, "resolved")
	case o.Kind == Resolve:
		fmt.Fprintf(&b, "not resolved")
	case o.Token && (o.Kind == DNSUDP || o.Kind == DNSTCP):
		fmt.Fprintf(&b, "reached in %d ms, the canary's own answer", o.ReachedMS)
	case o.Token:
		fmt.Fprintf(&b, "reached in %d ms, canary token read", o.ReachedMS)
	case o.Answered:
		fmt.Fprintf(&b, "reached in %d ms, answered", o.ReachedMS)
	case o.Reached:
		fmt.Fprintf(&b, "reached in %d ms", o.ReachedMS)
	default:
		fmt.Fprintf(&b, "not reached")
	}
	if o.Detail != "" {
		fmt.Fprintf(&b, " (%s)", o.Detail)
	}
	fmt.Fprintf(&b, "; %d attempt(s) over %d ms", o.Attempts, o.ElapsedMS)
	if len(o.Errors) > 0 {
		b.WriteString("; errors:")
		for _, k := range sortedKeys(o.Errors) {
			fmt.Fprintf(&b, " %s x%d", k, o.Errors[k])
		}
	}
	return b.String()
}
