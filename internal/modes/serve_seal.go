package modes

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/seal"
)

// resolvConfPath is serve's own resolver configuration: in its pod, the
// cluster DNS and the cluster domain.
const resolvConfPath = "/etc/resolv.conf"

// sealOptions are the addresses serve's sandbox pods prove cut before they
// are Ready, from the flags or, inside a cluster, from what serve's own pod
// sees: the API server's Service (KUBERNETES_SERVICE_HOST/PORT) and, for
// sealed snippet pods, the cluster DNS of its resolv.conf, asked for the
// kubernetes Service's name in the cluster domain its search list names.
// Outside a cluster --seal-probe is required: without an address to prove
// against, no pod could ever be Ready.
func (f *KubeFlags) sealOptions(getenv func(string) string, readFile func(string) ([]byte, error)) (kube.SealOptions, error) {
	for _, a := range append(append([]string(nil), f.SealProbe...), f.SealDNS...) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return kube.SealOptions{}, fmt.Errorf("--seal-probe/--seal-dns %q: %w", a, err)
		}
	}
	o := kube.SealOptions{Probes: f.SealProbe, DNS: f.SealDNS}
	apiServer := seal.APIServerAddr(getenv)
	if len(o.Probes) == 0 && apiServer != "" {
		o.Probes = []string{apiServer}
	}
	if len(o.Probes) == 0 {
		return o, errors.New("--seal-probe: no address to prove the sandbox pods' egress cut against; outside a cluster, give the API server's Service address as the pods see it (KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT inside one)")
	}
	domain := "cluster.local"
	if b, err := readFile(resolvConfPath); err == nil && apiServer != "" {
		rc := seal.ParseResolvConf(b)
		if d := rc.ClusterDomain(); d != "" {
			domain = d
		}
		if len(o.DNS) == 0 {
			for _, t := range rc.DNSTargets("") {
				o.DNS = append(o.DNS, t.Addr)
			}
		}
	}
	o.DNSName = "kubernetes.default.svc." + domain + "."
	return o, nil
}

// osSealOptions is sealOptions from this process's environment and files.
func (f *KubeFlags) osSealOptions() (kube.SealOptions, error) {
	return f.sealOptions(os.Getenv, os.ReadFile)
}
