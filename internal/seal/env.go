package seal

import (
	"bufio"
	"bytes"
	"net"
	"strings"
)

// APIServerAddr is the API server's Service address (host:port) from the
// variables the kubelet gives every container, service links or not; ""
// outside a cluster.
func APIServerAddr(getenv func(string) string) string {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// ResolvConf is what serve learns from its own /etc/resolv.conf: the
// cluster DNS it uses, and the cluster domain its search list implies.
type ResolvConf struct {
	Nameservers []string
	Search      []string
}

// ParseResolvConf reads the nameserver and search lines of a resolv.conf.
func ParseResolvConf(b []byte) ResolvConf {
	var rc ResolvConf
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			rc.Nameservers = append(rc.Nameservers, f[1])
		case "search":
			rc.Search = append(rc.Search, f[1:]...)
		}
	}
	return rc
}

// ClusterDomain is the domain after "svc." in the search list a pod's
// ClusterFirst DNS policy writes ("<ns>.svc.cluster.local svc.cluster.local
// cluster.local"), or "" when there is none.
func (rc ResolvConf) ClusterDomain() string {
	for _, s := range rc.Search {
		if d, ok := strings.CutPrefix(strings.TrimSuffix(s, "."), "svc."); ok && d != "" {
			return d
		}
	}
	return ""
}

// DNSTargets are the resolvers of rc as DNS targets asking name, each on
// port 53.
func (rc ResolvConf) DNSTargets(name string) []Target {
	var ts []Target
	for _, ns := range rc.Nameservers {
		if ip := net.ParseIP(ns); ip == nil || ip.IsLoopback() {
			continue // a pod's own resolver is not a path out of it
		}
		ts = append(ts, Target{Kind: DNS, Addr: net.JoinHostPort(ns, "53"), Name: name})
	}
	return ts
}
