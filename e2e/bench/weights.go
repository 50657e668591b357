package bench

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeWeights is the -compare name that compares the kind node's CPU
// weights (cgroup v1 cpu.shares) rather than a serve setting: "as-built" is
// what the node has when the bench starts, "default" what systemd and
// kubeadm give without the node image's settings (e2e/node/10-cpu-weight.conf,
// CONTROL_PLANE_CPU_REQUEST in e2e/hack/lib.sh). The bench writes them into
// the node's cgroups by hand in turns, and leaves them as built.
const NodeWeights = "node-cpu-weights"

// defaultWeights are cpu.shares without the node image's settings: a
// systemd slice's default, and each control-plane pod's kubeadm request in
// shares (millicores × 1024 / 1000).
var defaultWeights = map[string]int{
	"system.slice": 1024, "kubelet.slice": 1024,
	"kube-apiserver": 256, "kube-controller-manager": 204, "etcd": 102, "kube-scheduler": 102,
}

// nodeWeights maps each weight's name (a slice or a control-plane pod) to
// its cpu.shares file in the node.
type nodeWeights struct {
	node  string
	files map[string]string
}

// findNodeWeights locates the files: the slices at the node's cgroup root,
// the control plane's static pods by the hash the kubelet names their
// cgroup after.
func (b *Bench) findNodeWeights(ctx context.Context) (*nodeWeights, error) {
	node, err := b.o.Env.Cluster.ControlPlane()
	if err != nil {
		return nil, err
	}
	const root = "/sys/fs/cgroup/cpu"
	w := &nodeWeights{node: node, files: map[string]string{}}
	for _, s := range []string{"system.slice", "kubelet.slice"} {
		w.files[s] = root + "/" + s + "/cpu.shares"
	}
	pods, err := b.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "tier=control-plane"})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		c, hash := p.Labels["component"], p.Annotations["kubernetes.io/config.hash"]
		if _, ok := defaultWeights[c]; ok && hash != "" {
			w.files[c] = fmt.Sprintf("%s/kubelet/kubepods/burstable/pod%s/cpu.shares", root, hash)
		}
	}
	if len(w.files) != len(defaultWeights) {
		return nil, fmt.Errorf("node CPU weights: found %d of %d cgroups (%v); the comparison needs cgroup v1 and kubeadm's control plane",
			len(w.files), len(defaultWeights), slices.Sorted(maps.Keys(w.files)))
	}
	return w, nil
}

// read returns every weight's cpu.shares now.
func (w *nodeWeights) read(ctx context.Context) (map[string]int, error) {
	names := slices.Sorted(maps.Keys(w.files))
	var paths []string
	for _, n := range names {
		paths = append(paths, w.files[n])
	}
	out, err := cmd(ctx, "docker", append([]string{"exec", w.node, "cat"}, paths...)...)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(out)
	if len(f) != len(names) {
		return nil, fmt.Errorf("node CPU weights: read %q", out)
	}
	got := map[string]int{}
	for i, n := range names {
		if got[n], err = strconv.Atoi(f[i]); err != nil {
			return nil, fmt.Errorf("node CPU weights: %s: %w", n, err)
		}
	}
	return got, nil
}

// write sets every weight in set.
func (w *nodeWeights) write(ctx context.Context, set map[string]int) error {
	var sh []string
	for _, n := range slices.Sorted(maps.Keys(set)) {
		sh = append(sh, fmt.Sprintf("echo %d > %s", set[n], w.files[n]))
	}
	_, err := cmd(ctx, "docker", "exec", w.node, "sh", "-ec", strings.Join(sh, "; "))
	return err
}

// nodeWeightsSetter returns the comparison's setter for NodeWeights and the
// restore of the weights as built.
func (b *Bench) nodeWeightsSetter(ctx context.Context, values []string) (set func(context.Context, string) error, restore func(context.Context) error, err error) {
	w, err := b.findNodeWeights(ctx)
	if err != nil {
		return nil, nil, err
	}
	built, err := w.read(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, v := range values {
		if v != "as-built" && v != "default" {
			return nil, nil, fmt.Errorf("-compare %s: values are as-built and default, not %q", NodeWeights, v)
		}
	}
	b.logf("node CPU weights as built: %v", built)
	set = func(ctx context.Context, v string) error {
		want := built
		if v == "default" {
			want = defaultWeights
		}
		if err := w.write(ctx, want); err != nil {
			return err
		}
		// The pools refill as the last turn left them; let them idle.
		return b.waitIdle(ctx)
	}
	restore = func(ctx context.Context) error { return w.write(ctx, built) }
	return set, restore, nil
}

// cmd runs a command on the bench's host and returns its output.
func cmd(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, clip(string(out), 200))
	}
	return string(out), nil
}
