package kindenv

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// CanaryToken is in the body of every answer a stand-in gives, so a probe
// can tell that it reached the canary and not something else.
const CanaryToken = "sandbox-canary"

// Standin is a canary container on a Docker network of its own, answering
// HTTP on port 80. Traffic to it never leaves this machine.
type Standin struct {
	Role    string // "metadata" or "internet"
	Network string // Docker network name
	Subnet  string
	IP      string // the canary's address
}

// URL is the canary's HTTP address.
func (s Standin) URL() string { return "http://" + s.IP + "/" }

// Standins are the stand-ins for the cloud metadata service and for "the
// internet" that the e2e suite and `sandbox verify` aim at instead of real
// outside addresses.
type Standins struct {
	Metadata Standin
	Internet Standin
}

// DefaultStandins: the metadata address every cloud uses, and an address in
// TEST-NET-2 (198.51.100.0/24, documentation only) outside every private range.
var DefaultStandins = Standins{
	Metadata: Standin{Role: "metadata", Network: "sandbox-e2e-metadata", Subnet: "169.254.169.0/24", IP: "169.254.169.254"},
	Internet: Standin{Role: "internet", Network: "sandbox-e2e-internet", Subnet: "198.51.100.0/24", IP: "198.51.100.10"},
}

// canaryScript serves CanaryToken and the role on every path.
const canaryScript = `
import http.server, sys
body = ("%s %s\n" % (sys.argv[1], sys.argv[2])).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("", 80), H).serve_forever()
`

func docker(ctx context.Context, args ...string) (string, error) {
	out, err := cmd{name: "docker", args: args, timeout: 2 * time.Minute}.output(ctx)
	return strings.TrimSpace(out), err
}

// Up starts both canaries (from image, which must have python3; they run as
// uid 0 to bind port 80) and attaches every node container to their
// networks. It is idempotent.
func (ss Standins) Up(ctx context.Context, image string, nodes ...string) error {
	for _, s := range []Standin{ss.Metadata, ss.Internet} {
		if err := s.up(ctx, image, nodes...); err != nil {
			return fmt.Errorf("%s stand-in: %w", s.Role, err)
		}
	}
	return nil
}

func (s Standin) container() string { return s.Network + "-canary" }

func (s Standin) up(ctx context.Context, image string, nodes ...string) error {
	if _, err := docker(ctx, "network", "inspect", s.Network); err != nil {
		if _, err := docker(ctx, "network", "create", "--subnet", s.Subnet, s.Network); err != nil {
			return err
		}
	}
	_, _ = docker(ctx, "rm", "-f", s.container())
	if _, err := docker(ctx, "run", "-d", "--name", s.container(), "--network", s.Network, "--ip", s.IP,
		"--user", "0", "--entrypoint", "python3", image, "-c", canaryScript, CanaryToken, s.Role); err != nil {
		return err
	}
	for _, node := range nodes {
		nets, err := docker(ctx, "inspect", "--format", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", node)
		if err != nil {
			return err
		}
		if !strings.Contains(" "+nets+" ", " "+s.Network+" ") {
			if _, err := docker(ctx, "network", "connect", s.Network, node); err != nil {
				return err
			}
		}
	}
	return nil
}

// NodeAddr is node's address on the stand-in's network (Up attached it).
func (s Standin) NodeAddr(ctx context.Context, node string) (string, error) {
	ip, err := docker(ctx, "inspect", "--format", `{{with index .NetworkSettings.Networks "`+s.Network+`"}}{{.IPAddress}}{{end}}`, node)
	if err != nil {
		return "", err
	}
	if ip == "" {
		return "", fmt.Errorf("node %s has no address on network %s", node, s.Network)
	}
	return ip, nil
}

// Down removes the canaries and their networks (after disconnecting the
// nodes that still exist). Errors are joined, not stopped at.
func (ss Standins) Down(ctx context.Context, nodes ...string) error {
	var errs []string
	for _, s := range []Standin{ss.Metadata, ss.Internet} {
		if _, err := docker(ctx, "rm", "-f", s.container()); err != nil {
			errs = append(errs, err.Error())
		}
		for _, node := range nodes {
			_, _ = docker(ctx, "network", "disconnect", "-f", s.Network, node)
		}
		if _, err := docker(ctx, "network", "inspect", s.Network); err == nil {
			if _, err := docker(ctx, "network", "rm", s.Network); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove stand-ins: %s", strings.Join(errs, "; "))
	}
	return nil
}
