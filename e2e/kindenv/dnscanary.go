package kindenv

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The DNS canary: an authoritative server for one zone, outside the
// cluster, that the cluster's CoreDNS forwards the zone to. It logs every
// name it is asked, so a test can tell whether a snippet's lookup of
// <token>.<zone> left the cluster.
const (
	// DNSCanaryZone is the canary's zone (.test is reserved: no real
	// server has it).
	DNSCanaryZone = "exfil.sandbox.test"
	// DNSCanaryIP is the canary's address, on the internet stand-in's
	// network (TEST-NET-2), and the A record it gives every name in its
	// zone: an answer holding it came from the canary.
	DNSCanaryIP = "198.51.100.53"
	// dnsCanaryContainer is its Docker container.
	dnsCanaryContainer = "sandbox-e2e-dns-canary"
)

// dnsCanaryScript answers DNS over UDP and TCP on port 53: A <ip> for every
// name in the zone (TTL 0, so nothing caches it), REFUSED outside it, and
// prints "query <name> <type>" for each question.
const dnsCanaryScript = `
import socket, struct, sys, threading
ZONE = sys.argv[1].lower().rstrip(".")
ANSWER = socket.inet_aton(sys.argv[2])

def reply(q):
    if len(q) < 12:
        return None
    qid, flags, qd = struct.unpack(">HHH", q[:6])
    if qd != 1:
        return None
    labels, off = [], 12
    while off < len(q) and q[off] != 0:
        n = q[off]
        labels.append(q[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n
    off += 1
    if off + 4 > len(q):
        return None
    qtype, _ = struct.unpack(">HH", q[off:off + 4])
    name = ".".join(labels).lower()
    print("query %s %d" % (name, qtype), flush=True)
    inzone = name == ZONE or name.endswith("." + ZONE)
    an = b""
    if inzone and qtype in (1, 255):
        an = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + ANSWER
    rcode = 0 if inzone else 5
    hdr = struct.pack(">HHHHHH", qid, 0x8400 | (flags & 0x0100) | rcode, 1, 1 if an else 0, 0, 0)
    return hdr + q[12:off + 4] + an

def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("", 53))
    while True:
        q, peer = s.recvfrom(4096)
        r = reply(q)
        if r:
            s.sendto(r, peer)

def tcp_conn(c):
    with c:
        c.settimeout(5)
        try:
            n = struct.unpack(">H", c.recv(2))[0]
            q = b""
            while len(q) < n:
                chunk = c.recv(n - len(q))
                if not chunk:
                    return
                q += chunk
            r = reply(q)
            if r:
                c.sendall(struct.pack(">H", len(r)) + r)
        except (OSError, struct.error):
            pass

def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", 53))
    s.listen(16)
    while True:
        c, _ = s.accept()
        threading.Thread(target=tcp_conn, args=(c,), daemon=True).start()

threading.Thread(target=udp, daemon=True).start()
tcp()
`

// corefileBlock is the server block CoreDNS gets for the canary's zone: no
// cache, so every lookup reaches the canary.
func corefileBlock() string {
	return fmt.Sprintf("%s:53 {\n    errors\n    forward . %s\n}\n", DNSCanaryZone, DNSCanaryIP)
}

// DNSCanaryUp starts the canary on the internet stand-in's network (which
// StandinsUp created and attached the node to) and has CoreDNS forward its
// zone there, restarting CoreDNS when its configuration changed. It is
// idempotent.
func (e *Env) DNSCanaryUp(ctx context.Context) error {
	return e.Phase("DNS canary "+DNSCanaryZone, func() error {
		_, _ = docker(ctx, "rm", "-f", dnsCanaryContainer)
		if _, err := docker(ctx, "run", "-d", "--name", dnsCanaryContainer, "--network", e.Standins.Internet.Network, "--ip", DNSCanaryIP,
			"--user", "0", "--entrypoint", "python3", e.Image, "-u", "-c", dnsCanaryScript, DNSCanaryZone, DNSCanaryIP); err != nil {
			return err
		}
		cf, err := e.Kubectl.Run(ctx, nil, "-n", "kube-system", "get", "configmap", "coredns", "-o", "jsonpath={.data.Corefile}")
		if err != nil {
			return fmt.Errorf("read the CoreDNS configuration: %w", err)
		}
		if strings.Contains(cf, DNSCanaryZone+":53") {
			return nil
		}
		patch, err := json.Marshal(map[string]any{"data": map[string]string{"Corefile": strings.TrimRight(cf, "\n") + "\n" + corefileBlock()}})
		if err != nil {
			return err
		}
		if _, err := e.Kubectl.Run(ctx, nil, "-n", "kube-system", "patch", "configmap", "coredns", "--type", "merge", "-p", string(patch)); err != nil {
			return fmt.Errorf("add the canary zone to CoreDNS: %w", err)
		}
		if _, err := e.Kubectl.Run(ctx, nil, "-n", "kube-system", "rollout", "restart", "deployment/coredns"); err != nil {
			return err
		}
		_, err = e.Kubectl.Run(ctx, nil, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=3m")
		return err
	})
}

// DNSCanaryQueries returns the names the canary has been asked so far.
func DNSCanaryQueries(ctx context.Context) ([]string, error) {
	out, err := cmd{name: "docker", args: []string{"logs", dnsCanaryContainer}, timeout: 30 * time.Second}.output(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "query" {
			names = append(names, f[1])
		}
	}
	return names, nil
}

// dnsCanaryDown removes the canary's container (before its network goes).
func dnsCanaryDown(ctx context.Context) error {
	_, err := docker(ctx, "rm", "-f", dnsCanaryContainer)
	return err
}
