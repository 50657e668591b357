package kindenv

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

const (
	// Namespace and Deployment are the names manifests/ gives them.
	Namespace  = "sandbox"
	Deployment = "sandbox"
)

// Kubectl runs the kubectl built for the cluster against one kubeconfig.
type Kubectl struct {
	Path       string
	Kubeconfig string
}

// Run runs kubectl with args and stdin, returning stdout.
func (k Kubectl) Run(ctx context.Context, stdin []byte, args ...string) (string, error) {
	c := cmd{name: k.Path, args: append([]string{"--kubeconfig", k.Kubeconfig}, args...), timeout: 5 * time.Minute}
	if stdin != nil {
		c.stdin = bytes.NewReader(stdin)
	}
	return c.output(ctx)
}

// PodCPURequest is the CPU request of snippet pods on kind. The node has the
// host's 2 CPUs and its other pods request about 0.45 of them (coredns and
// serve 0.2 each), so the default 1-CPU request would let one warm pod
// schedule and leave the rest Pending (and a rollout stuck between two
// serve pods' pools). The 1-CPU limit is unchanged.
//
// A request is also the pod's CPU weight when the node is busy (cpu.shares
// 51 at 50m), and a warm pod's snippet runs while the pods that replace
// the used ones start beside it: at 10m its run waited behind them (the
// section of docs/speed.md on the kind node's CPU weights has the figures). 50m fits about 31 snippet pods; under a burst each of the
// two replicas grows to --pool-max (12) unclaimed pods plus one per run in
// flight, and the rest wait to be scheduled while the node, busy starting
// the others, could not start them sooner anyway. The node's other weights
// are set to match: see 10-cpu-weight.conf in e2e/node and
// CONTROL_PLANE_CPU_REQUEST in hack/lib.sh.
const PodCPURequest = "50m"

// Manifests renders `sandbox manifests --image image --pod-cpu-request
// PodCPURequest` with the sandbox binary, and extra flags.
func Manifests(ctx context.Context, sandboxBin, image string, extra ...string) ([]byte, error) {
	args := append([]string{"manifests", "--image", image, "--pod-cpu-request", PodCPURequest}, toolManifestArgs()...)
	out, err := cmd{name: sandboxBin, args: append(args, extra...), timeout: time.Minute}.output(ctx)
	if err != nil {
		return nil, fmt.Errorf("render manifests: %w", err)
	}
	if len(bytes.TrimSpace([]byte(out))) == 0 {
		return nil, fmt.Errorf("render manifests: %s printed nothing", sandboxBin)
	}
	return []byte(out), nil
}

// Deploy applies the service's manifests (sandbox manifests ... | kubectl
// apply -f -), and the suite's callers over them.
func Deploy(ctx context.Context, k Kubectl, sandboxBin, image string, extra ...string) error {
	m, err := Manifests(ctx, sandboxBin, image, extra...)
	if err != nil {
		return err
	}
	if _, err := k.Run(ctx, m, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("apply manifests: %w", err)
	}
	return applyCallers(ctx, k)
}

// WaitAvailable waits until the sandbox Deployment reports Available.
func WaitAvailable(ctx context.Context, k Kubectl, timeout time.Duration) error {
	_, err := k.Run(ctx, nil, "-n", Namespace, "wait", "--for=condition=Available",
		"deployment/"+Deployment, fmt.Sprintf("--timeout=%s", timeout))
	return err
}
