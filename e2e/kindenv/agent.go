package kindenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The sample agent and what the e2e deployment lets tool calls run.
const (
	// AgentImage is the sample agent image (e2e/hack/agent-image.sh): the
	// tools package of e2e/agent and python/sandbox_client in /app.
	AgentImage = "sandbox-e2e/agent:dev"
	// AbsentImagePrefix is allowed for tool calls but holds no image
	// anywhere: a call to one must end in the readiness deadline's 504.
	AbsentImagePrefix = "sandbox-e2e/absent/"
	// ToolReadyTimeout is the deployment's tool-pod readiness deadline:
	// short, so that the absent image's 504 comes quickly; a pod of a
	// loaded image is Ready in a few seconds.
	ToolReadyTimeout = 30 * time.Second
)

// ToolImages is the e2e deployment's tool-call allow list: the agent image
// first (verify calls the first exact entry), then the absent prefix, then
// the agent image under its egress tag with its names (verify's egress
// checks call the first entry with names).
func ToolImages() []string {
	return []string{AgentImage, AbsentImagePrefix, EgressImage + "=" + EgressAllowList}
}

// AgentImage builds (or finds up to date) the sample agent image.
func (s Scripts) AgentImage(ctx context.Context) error {
	_, err := s.run(ctx, 15*time.Minute, "agent-image.sh")
	return err
}

// PrivateStandins are canaries in the private ranges where a kind cluster
// has no address of its own (its pods and Services are in 10/8, its nodes in
// 172.16/12), so that verify can show tool pods blocked from each range.
var PrivateStandins = []Standin{
	{Role: "private-192-168", Network: "sandbox-e2e-private-192", Subnet: "192.168.241.0/24", IP: "192.168.241.10"},
	{Role: "private-100-64", Network: "sandbox-e2e-private-100", Subnet: "100.64.241.0/24", IP: "100.64.241.10"},
}

// PrivateAddrs are the private stand-ins as host:port, for verify's
// --private-addr.
func PrivateAddrs() []string {
	var out []string
	for _, s := range PrivateStandins {
		out = append(out, s.IP+":80")
	}
	return out
}

// PrivateStandinsUp starts the private-range canaries and attaches every node.
// It is idempotent.
func (e *Env) PrivateStandinsUp(ctx context.Context) error {
	return e.Phase("private-range stand-ins", func() error {
		for _, s := range PrivateStandins {
			if err := s.up(ctx, e.Image, e.Nodes...); err != nil {
				return fmt.Errorf("%s stand-in: %w", s.Role, err)
			}
		}
		return nil
	})
}

// privateStandinsDown removes them (after disconnecting the nodes, if any).
func privateStandinsDown(ctx context.Context, nodes ...string) error {
	var errs []error
	for _, s := range PrivateStandins {
		if _, err := docker(ctx, "rm", "-f", s.container()); err != nil {
			errs = append(errs, err)
		}
		for _, node := range nodes {
			_, _ = docker(ctx, "network", "disconnect", "-f", s.Network, node)
		}
		if _, err := docker(ctx, "network", "inspect", s.Network); err == nil {
			if _, err := docker(ctx, "network", "rm", s.Network); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove private stand-ins: %w", err)
	}
	return nil
}

// RolloutStatus waits until every replica of the Deployment runs its
// current template: after `kubectl apply` changed serve's settings on a
// reused cluster, Available alone is already true of the old replicas.
func (e *Env) RolloutStatus(ctx context.Context, timeout time.Duration) error {
	_, err := e.Kubectl.Run(ctx, nil, "-n", Namespace, "rollout", "status", "deployment/"+Deployment,
		fmt.Sprintf("--timeout=%s", timeout))
	return err
}

// toolManifestArgs are the `sandbox manifests` flags of the e2e deployment's
// tool calls.
func toolManifestArgs() []string {
	return []string{"--tool-images", strings.Join(ToolImages(), ";"), "--tool-ready-timeout", ToolReadyTimeout.String(),
		"--egress-permit", EgressPermit}
}
