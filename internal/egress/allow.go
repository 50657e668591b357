// Package egress is tool pods' egress by name: the allow list an operator
// gives each tool image (none, a list of names, or the internet), and the
// gateway (`sandbox egress`) that is the only way out for a tool pod with
// names: an HTTP proxy that judges each connection by the list of the pod
// it comes from, resolves names itself, refuses every non-public answer,
// and never terminates TLS.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Mode is what a tool pod may reach.
type Mode string

const (
	// None: nothing at all, not even DNS (lookups are answered in the pod).
	None Mode = "none"
	// Names: the listed names and ports, through the gateway only.
	Names Mode = "names"
	// Internet: every public address, directly (the seeds' behaviour).
	Internet Mode = "internet"
)

// Default ports of a name listed without one: HTTPS and HTTP.
const (
	PortHTTPS = 443
	PortHTTP  = 80
)

// maxRules bounds one image's list: enough for any real tool, and it keeps
// the annotation the gateway reads small.
const maxRules = 64

// Rule is one entry of a list: a host name, a "*." wildcard for every name
// below a domain (never the domain itself), or an IP literal; Port 0 means
// PortHTTPS and PortHTTP.
type Rule struct {
	Host     string // lower case, no trailing dot; the domain of a wildcard
	Wildcard bool
	IP       netip.Addr // set for an IP literal
	Port     int
}

// Egress is one image's egress: Rules only in Names mode.
type Egress struct {
	Mode  Mode
	Rules []Rule
}

// String is e in the syntax Parse reads, canonical: the form the gateway
// reads from a tool pod's annotation.
func (e Egress) String() string {
	if e.Mode != Names {
		return string(e.Mode)
	}
	out := make([]string, len(e.Rules))
	for i, r := range e.Rules {
		out[i] = r.String()
	}
	return strings.Join(out, ",")
}

// String is r as the list writes it.
func (r Rule) String() string {
	h := r.Host
	switch {
	case r.Wildcard:
		h = "*." + h
	case r.IP.IsValid() && r.IP.Is6():
		if r.Port == 0 {
			return r.IP.String()
		}
		h = "[" + r.IP.String() + "]"
	case r.IP.IsValid():
		h = r.IP.String()
	}
	if r.Port != 0 {
		h += ":" + strconv.Itoa(r.Port)
	}
	return h
}

// Parse reads an egress: "none", "internet", or a comma-separated list of
// names ("api.example.com", "*.example.org", "host:8443", an IP literal
// such as "203.0.113.7" or "[2001:db8::1]:8443"). Names are ASCII (write
// an internationalised name in its xn-- form) and matched without case.
func Parse(s string) (Egress, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return Egress{}, errors.New("empty egress: want none, internet, or names such as api.example.com,*.example.org")
	case string(None):
		return Egress{Mode: None}, nil
	case string(Internet):
		return Egress{Mode: Internet}, nil
	}
	var e Egress
	e.Mode = Names
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return Egress{}, fmt.Errorf("egress %q: an empty name (two commas, or one at an end)", s)
		}
		switch strings.ToLower(item) {
		case string(None), string(Internet):
			return Egress{}, fmt.Errorf("egress %q: %s stands alone, not in a list of names", s, item)
		}
		r, err := parseRule(item)
		if err != nil {
			return Egress{}, err
		}
		if !slices.Contains(e.Rules, r) {
			e.Rules = append(e.Rules, r)
		}
	}
	if len(e.Rules) > maxRules {
		return Egress{}, fmt.Errorf("egress: %d names, at most %d", len(e.Rules), maxRules)
	}
	return e, nil
}

func parseRule(item string) (Rule, error) {
	host, port := item, 0
	if h, p, err := net.SplitHostPort(item); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Rule{}, fmt.Errorf("egress name %q: port %q is not a number from 1 to 65535", item, p)
		}
		host, port = h, n
	} else if h, ok := strings.CutPrefix(item, "["); ok && strings.HasSuffix(h, "]") {
		host = strings.TrimSuffix(h, "]")
	} else if strings.Count(item, ":") == 1 || strings.HasPrefix(item, "[") {
		return Rule{}, fmt.Errorf("egress name %q: want host or host:port", item)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("egress name %q: an address with a zone is not an internet address", item)
		}
		return Rule{Host: a.Unmap().String(), IP: a.Unmap(), Port: port}, nil
	}
	wild := false
	if d, ok := strings.CutPrefix(host, "*."); ok {
		host, wild = d, true
	}
	h, err := CanonicalHost(host)
	if err != nil {
		return Rule{}, fmt.Errorf("egress name %q: %w", item, err)
	}
	if wild && !strings.Contains(h, ".") {
		return Rule{}, fmt.Errorf("egress name %q: a wildcard must stand below a domain of two labels at least (*.example.org), never a whole top-level domain", item)
	}
	return Rule{Host: h, Wildcard: wild, Port: port}, nil
}

// CanonicalHost checks a DNS name and returns it in lower case without a
// trailing dot: the form lists, CONNECT hosts and SNI are compared in.
func CanonicalHost(h string) (string, error) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" || len(h) > 253 {
		return "", errors.New("a name must have 1 to 253 characters")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("label %q: a label has 1 to 63 characters", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("label %q: a label neither starts nor ends with -", label)
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("label %q: only letters, digits, - and _ (an internationalised name in its xn-- form; * only as a whole first label)", label)
			}
		}
	}
	if _, err := strconv.Atoi(h[strings.LastIndexByte(h, '.')+1:]); err == nil {
		return "", errors.New("an all-numeric last label is an address, not a name")
	}
	return h, nil
}

// Allows reports whether e lets a connection to host:port through: host is
// a canonical name (CanonicalHost) or an IP literal.
func (e Egress) Allows(host string, port int) bool {
	switch e.Mode {
	case Internet:
		return true
	case Names:
	default:
		return false
	}
	ip, ipErr := netip.ParseAddr(host)
	for _, r := range e.Rules {
		if r.Port == 0 && port != PortHTTPS && port != PortHTTP || r.Port != 0 && r.Port != port {
			continue
		}
		switch {
		case r.IP.IsValid():
			if ipErr == nil && ip.Unmap() == r.IP {
				return true
			}
		case ipErr == nil:
			// A name's rule never allows an address: an IP literal must be
			// listed as one.
		case r.Wildcard:
			if strings.HasSuffix(host, "."+r.Host) {
				return true
			}
		case host == r.Host:
			return true
		}
	}
	return false
}

// Within reports whether e allows nothing outer does not: what a caller's
// egress for an image must be to narrow the deployment's. none is within
// anything, internet only within internet, and a list within internet or
// within a list that allows each of its rules (a wildcard only under a
// wildcard that covers its whole domain).
func (e Egress) Within(outer Egress) bool {
	switch {
	case e.Mode == None || outer.Mode == Internet:
		return true
	case e.Mode != Names || outer.Mode != Names:
		return false
	}
	for _, r := range e.Rules {
		ports := []int{r.Port}
		if r.Port == 0 {
			ports = []int{PortHTTPS, PortHTTP}
		}
		for _, p := range ports {
			if !outer.covers(r, p) {
				return false
			}
		}
	}
	return true
}

// covers reports whether e allows every host r matches on port p.
func (e Egress) covers(r Rule, p int) bool {
	if !r.Wildcard {
		return e.Allows(r.Host, p)
	}
	for _, o := range e.Rules {
		if o.Wildcard && (o.Port == p || o.Port == 0 && (p == PortHTTPS || p == PortHTTP)) &&
			(r.Host == o.Host || strings.HasSuffix(r.Host, "."+o.Host)) {
			return true
		}
	}
	return false
}
