package kindenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Egress by name on kind: a TLS stand-in on port 443 of the internet
// stand-in's network, and names the cluster DNS answers for the gateway
// (tool pods resolve nothing themselves). Everything is made here, offline:
// the stand-in's certificate too.
const (
	// TLSStandinIP is the TLS stand-in's address (TEST-NET-2, which the
	// gateway refuses unless permitted: the deployment permits
	// EgressPermit).
	TLSStandinIP = "198.51.100.43"
	// EgressPermit is the gateway's --permit on kind: the internet
	// stand-ins' network.
	EgressPermit = "198.51.100.0/24"
	// EgressImage is the agent image under a second tag, whose allow-list
	// entry has names: the agent image itself stays on internet egress for
	// the other tool-call checks.
	EgressImage = "sandbox-e2e/agent:egress"
	// tlsStandinContainer is its Docker container.
	tlsStandinContainer = "sandbox-e2e-tls-standin"
)

// EgressNames are the names CoreDNS answers for the egress checks: two for
// the TLS stand-in (one on the egress image's list, one not), one in a
// private range (the 192.168 stand-in) and the metadata stand-in.
var EgressNames = map[string]string{
	"allowed.test": TLSStandinIP,
	"other.test":   TLSStandinIP,
	"rebind.test":  "192.168.241.10",
	"meta.test":    "169.254.169.254",
}

// EgressAllowList is the egress image's list: the allowed name and the two
// that rebind (the gateway must refuse those for their answers, not for
// the list).
const EgressAllowList = "allowed.test,rebind.test,meta.test"

// tlsStandinScript serves HTTPS on 443 with the certificate in /certs,
// answering CanaryToken, the role and the name the client asked for, or
// /size/N bytes.
const tlsStandinScript = `
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/size/"):
            # /size/N: N zero bytes, for the gateway's throughput.
            n = int(self.path[len("/size/"):])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = bytes(1 << 16)
            while n > 0:
                self.wfile.write(chunk[:min(n, len(chunk))])
                n -= min(n, len(chunk))
            return
        body = ("%s tls %s\n" % (sys.argv[1], self.headers.get("Host", ""))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/certs/cert.pem", "/certs/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
`

// writeStandinCert writes a self-signed certificate for the stand-in's
// names into dir (cert.pem, key.pem), readable by the container.
func writeStandinCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "allowed.test"},
		DNSNames: []string{"allowed.test", "other.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o644)
}

// egressCorefileBlock answers EgressNames from CoreDNS itself.
func egressCorefileBlock() string {
	var zones, hosts []string
	for _, name := range []string{"allowed.test", "other.test", "rebind.test", "meta.test"} {
		zones = append(zones, name+":53")
		hosts = append(hosts, fmt.Sprintf("        %s %s", EgressNames[name], name))
	}
	return fmt.Sprintf("%s {\n    errors\n    hosts {\n%s\n    }\n}\n", strings.Join(zones, " "), strings.Join(hosts, "\n"))
}

// EgressUp starts the TLS stand-in (on the internet stand-in's network,
// which StandinsUp made) and has CoreDNS answer EgressNames, restarting it
// when its configuration changed. It is idempotent.
func (e *Env) EgressUp(ctx context.Context) error {
	return e.Phase("egress stand-ins (TLS on "+TLSStandinIP+":443, names *.test)", func() error {
		dir, err := os.MkdirTemp("", "sandbox-e2e-tls-")
		if err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		if err := writeStandinCert(dir); err != nil {
			return fmt.Errorf("stand-in certificate: %w", err)
		}
		_, _ = docker(ctx, "rm", "-f", tlsStandinContainer)
		if _, err := docker(ctx, "run", "-d", "--name", tlsStandinContainer, "--network", e.Standins.Internet.Network, "--ip", TLSStandinIP,
			"-v", dir+":/certs:ro", "--user", "0", "--entrypoint", "python3", e.Image, "-c", tlsStandinScript, CanaryToken); err != nil {
			return err
		}
		cf, err := e.Kubectl.Run(ctx, nil, "-n", "kube-system", "get", "configmap", "coredns", "-o", "jsonpath={.data.Corefile}")
		if err != nil {
			return fmt.Errorf("read the CoreDNS configuration: %w", err)
		}
		if strings.Contains(cf, "allowed.test:53") {
			return nil
		}
		patch, err := json.Marshal(map[string]any{"data": map[string]string{"Corefile": strings.TrimRight(cf, "\n") + "\n" + egressCorefileBlock()}})
		if err != nil {
			return err
		}
		if _, err := e.Kubectl.Run(ctx, nil, "-n", "kube-system", "patch", "configmap", "coredns", "--type", "merge", "-p", string(patch)); err != nil {
			return fmt.Errorf("add the egress names to CoreDNS: %w", err)
		}
		if _, err := e.Kubectl.Run(ctx, nil, "-n", "kube-system", "rollout", "restart", "deployment/coredns"); err != nil {
			return err
		}
		_, err = e.Kubectl.Run(ctx, nil, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=3m")
		return err
	})
}

// egressDown removes the TLS stand-in.
func egressDown(ctx context.Context) error {
	if _, err := docker(ctx, "rm", "-f", tlsStandinContainer); err != nil {
		return fmt.Errorf("remove the TLS stand-in: %w", err)
	}
	return nil
}
