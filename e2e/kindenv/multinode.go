package kindenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The multi-node rig: one control plane and N workers, all of the same
// offline node image. The image's baked CNI config (e2e/node/10-ptp.conflist)
// hands out the whole pod range, which is right for one node only; on more,
// each node gets a config of its own range once the cluster knows it, and
// the routes between the nodes' ranges that a CNI plugin would otherwise
// set up (see PodNetwork).
const (
	// WorkersEnv is how many worker nodes the cluster gets besides its
	// control plane: 0 (the default) is the single-node cluster, whose one
	// node runs everything.
	WorkersEnv = "SANDBOX_E2E_WORKERS"
	// maxWorkers bounds it: every node is a full kubelet and containerd on
	// the same few CPUs.
	maxWorkers = 4

	// multiNodeCNIDir is where containerd reads CNI configs on a multi-node
	// cluster: an empty directory at boot (containerd makes it), so that a
	// node reports its network not ready, and runs no pod, until PodNetwork
	// wrote its own range there. The baked config in /etc/cni/net.d stays
	// for the single-node cluster and is ignored here.
	multiNodeCNIDir = "/etc/cni/multinode.d"
	// masqComment marks the one masquerade rule PodNetwork adds per node.
	masqComment = "sandbox-e2e pod traffic leaving the pod range"
	// nodeReadyTimeout bounds the wait for every node to be Ready once its
	// network is configured.
	nodeReadyTimeout = 3 * time.Minute
)

// containerdMultiNodeCNI points containerd's CRI at multiNodeCNIDir.
var containerdMultiNodeCNI = `[plugins."io.containerd.grpc.v1.cri".cni]
  conf_dir = "` + multiNodeCNIDir + `"
`

// WorkersFromEnv reads WorkersEnv: unset or empty is 0.
func WorkersFromEnv() (int, error) { return ParseWorkers(os.Getenv(WorkersEnv)) }

// ParseWorkers parses a worker count: empty is 0, else 0..maxWorkers.
func ParseWorkers(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxWorkers {
		return 0, fmt.Errorf("%s=%q: want a number of worker nodes from 0 to %d", WorkersEnv, s, maxWorkers)
	}
	return n, nil
}

// NodeNet is one node's part of the pod network: its container (the Node's
// name on kind), its pod range and its address on kind's Docker network.
type NodeNet struct {
	Name    string
	PodCIDR netip.Prefix
	IP      netip.Addr
}

// nodeNets reads every Node's pod range and internal address from the
// API server (through the control plane's admin kubeconfig, so that it
// needs nothing of the host's). A node without either yet is left out:
// the caller waits for all of them.
func (c *Cluster) nodeNets(ctx context.Context, cp string) ([]NodeNet, *corev1.NodeList, error) {
	out, err := docker(ctx, "exec", cp, "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf", "get", "nodes", "-o", "json")
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	var list corev1.NodeList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	return netsOf(&list), &list, nil
}

// netsOf picks each Node's pod range and InternalIP, sorted by name;
// nodes without both are left out.
func netsOf(list *corev1.NodeList) []NodeNet {
	var nets []NodeNet
	for _, n := range list.Items {
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && ip.Is4() {
				nets = append(nets, NodeNet{Name: n.Name, PodCIDR: cidr.Masked(), IP: ip})
				break
			}
		}
	}
	slices.SortFunc(nets, func(a, b NodeNet) int { return strings.Compare(a.Name, b.Name) })
	return nets
}

// PodNetwork configures the pod network of a multi-node cluster, on every
// node whose container runs: its CNI config for its own pod range, a route
// to every other node's range through that node's address on kind's Docker
// network (the nodes share it, as kindnet's routes do), and one masquerade
// rule for pod traffic leaving the pod range. It is idempotent, and is run
// again after a node comes back (its routes and rules went with its
// network namespace; its address, or a re-registered node's range, may have
// changed). It waits until every node of the cluster has a range and an
// address, and returns once every running node is Ready. A single-node
// cluster needs none of it: its baked config serves the whole range.
func (c *Cluster) PodNetwork(ctx context.Context) error {
	nodes, err := c.provider.ListInternalNodes(c.Name)
	if err != nil {
		return fmt.Errorf("list nodes of %q: %w", c.Name, err)
	}
	cp, err := c.ControlPlane()
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, n := range nodes {
		if st, err := docker(ctx, "inspect", "--format", "{{.State.Running}}", n.String()); err == nil && st == "true" {
			running[n.String()] = true
		}
	}
	var nets []NodeNet
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nets, _, err = c.nodeNets(ctx, cp)
		var missing []string
		for name := range running {
			if !slices.ContainsFunc(nets, func(n NodeNet) bool { return n.Name == name }) {
				missing = append(missing, name)
			}
		}
		if err == nil && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("running nodes without a pod range or an address after 2m: %v (%v)", missing, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	for _, n := range nets {
		if !running[n.Name] {
			continue // stopped: configured when it runs again
		}
		script, err := nodeNetScript(n, nets)
		if err != nil {
			return err
		}
		if _, err := (cmd{name: "docker", args: []string{"exec", "-i", n.Name, "sh", "-s"}, stdin: strings.NewReader(script),
			timeout: time.Minute}).output(ctx); err != nil {
			return fmt.Errorf("pod network of node %s: %w", n.Name, err)
		}
	}
	return c.waitNodesReady(ctx, cp, running)
}

// waitNodesReady waits until every node named in want is Ready.
func (c *Cluster) waitNodesReady(ctx context.Context, cp string, want map[string]bool) error {
	deadline := time.Now().Add(nodeReadyTimeout)
	var notReady []string
	for {
		_, list, err := c.nodeNets(ctx, cp)
		if err == nil {
			notReady = notReady[:0]
			seen := 0
			for _, n := range list.Items {
				if !want[n.Name] {
					continue
				}
				seen++
				if !nodeReady(&n) {
					notReady = append(notReady, n.Name)
				}
			}
			if seen == len(want) && len(notReady) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes not Ready after %s: %v (%v)", nodeReadyTimeout, notReady, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ptpConflist is the baked e2e/node/10-ptp.conflist for one node's range,
// except ipMasq: the plugin's masquerade covers everything outside the
// node's own range, other nodes' pods too, and a NetworkPolicy that admits
// a pod by its address would then see the node's address instead. The
// node's masquerade rule (nodeNetScript) leaves the whole pod range alone.
func ptpConflist(podCIDR netip.Prefix) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "sandbox-ptp",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "ranges": [[{ "subnet": %q }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
`, podCIDR.String())
}

// nodeNetScript is the shell script PodNetwork runs on node self, given
// every node's part: it writes the CNI config (only when it changed, so
// that containerd reloads nothing for nothing), adds the masquerade rule
// once, sets a route to each other node's range and removes routes into
// the pod range through a gateway that no node has any more.
//
// The masquerade rule takes pod traffic to anything outside the pod range
// (the stand-ins, the nodes' own addresses, the Docker host), as the baked
// config's ipMasq does on one node; traffic from pod to pod, on one node or
// across nodes, keeps its source address.
func nodeNetScript(self NodeNet, all []NodeNet) (string, error) {
	if !self.PodCIDR.Addr().Is4() {
		return "", fmt.Errorf("node %s: pod range %s is not IPv4", self.Name, self.PodCIDR)
	}
	pod, err := netip.ParsePrefix(PodSubnet)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	// The new config is written beside the old under a name containerd
	// does not load (.tmp), then renamed over it: containerd, which
	// watches the directory, never reads half a file.
	fmt.Fprintf(&b, "set -eu\nmkdir -p %[1]s\ncd %[1]s\n", multiNodeCNIDir)
	fmt.Fprintf(&b, "cat >.10-ptp.conflist.tmp <<'EOF'\n%sEOF\n", ptpConflist(self.PodCIDR))
	b.WriteString("if cmp -s .10-ptp.conflist.tmp 10-ptp.conflist; then rm .10-ptp.conflist.tmp; else mv .10-ptp.conflist.tmp 10-ptp.conflist; fi\n")
	masq := fmt.Sprintf("POSTROUTING -s %s ! -d %s -m comment --comment %q -j MASQUERADE", pod, pod, masqComment)
	fmt.Fprintf(&b, "iptables -w -t nat -C %s 2>/dev/null || iptables -w -t nat -A %s\n", masq, masq)
	var want []string
	for _, n := range all {
		if n.Name == self.Name {
			continue
		}
		if !pod.Contains(n.PodCIDR.Addr()) || n.PodCIDR.Bits() < pod.Bits() {
			return "", fmt.Errorf("node %s: pod range %s is outside %s", n.Name, n.PodCIDR, pod)
		}
		fmt.Fprintf(&b, "ip route replace %s via %s\n", n.PodCIDR, n.IP)
		want = append(want, n.PodCIDR.String())
	}
	fmt.Fprintf(&b, "ip -4 route show root %s | awk '/ via /{print $1}' | while read -r dst; do\n", pod)
	fmt.Fprintf(&b, "  case \" %s \" in *\" $dst \"*) ;; *) ip route del \"$dst\" ;; esac\ndone\n", strings.Join(want, " "))
	return b.String(), nil
}

// Nodes lists the cluster's node containers: the control plane first, then
// the workers by name.
func (c *Cluster) Nodes() (controlPlane string, workers []string, err error) {
	nodes, err := c.provider.ListInternalNodes(c.Name)
	if err != nil {
		return "", nil, fmt.Errorf("list nodes of %q: %w", c.Name, err)
	}
	cp, err := c.ControlPlane()
	if err != nil {
		return "", nil, err
	}
	for _, n := range nodes {
		if n.String() != cp {
			workers = append(workers, n.String())
		}
	}
	slices.Sort(workers)
	return cp, workers, nil
}

// kubeletFlags is where kind's kubeadm left the kubelet's flags.
const kubeletFlags = "/var/lib/kubelet/kubeadm-flags.env"

// NodeStarted readies a node whose container was started again: its
// kubelet's --node-ip set back to its address on kind's network, and the
// kubelet restarted, so that it registers a new Node if its old one was
// deleted. On a node also attached to the stand-ins' networks, kind's
// entrypoint takes another of its addresses at the start: on kind on
// 2026-12-06 the link-local one on the metadata stand-in's network, which
// the kubelet refuses ("nodeIP can't be a link-local unicast address"), so
// that a Node registered again had no address and PodNetwork no route to
// it. systemd in the container may not take a command for a moment after
// docker start: tried again for a minute.
func NodeStarted(ctx context.Context, node string) error {
	addr, err := docker(ctx, "inspect", "--format", `{{(index .NetworkSettings.Networks "kind").IPAddress}}`, node)
	if err != nil {
		return fmt.Errorf("the address of %s on kind's network: %w", node, err)
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(addr))
	if err != nil {
		return fmt.Errorf("the address of %s on kind's network: %q: %w", node, addr, err)
	}
	script := fmt.Sprintf(`sed -i -E 's/--node-ip=[^ "]+/--node-ip=%s/' %s && systemctl restart kubelet`, ip, kubeletFlags)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := docker(ctx, "exec", node, "sh", "-c", script)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(2 * time.Second)
	}
}
