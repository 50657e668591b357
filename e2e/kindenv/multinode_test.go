package kindenv

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
)

func TestParseWorkers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		bad  bool
	}{
		{"", 0, false}, {" 2 ", 2, false}, {"0", 0, false}, {"4", 4, false},
		{"5", 0, true}, {"-1", 0, true}, {"two", 0, true},
	} {
		got, err := ParseWorkers(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseWorkers(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.bad)
		}
		if err != nil && !strings.Contains(err.Error(), WorkersEnv) {
			t.Errorf("ParseWorkers(%q): error %q does not name %s", c.in, err, WorkersEnv)
		}
	}
}

// TestConfigNodes: no workers is the one-node cluster of
// before, whose baked CNI config containerd reads; workers add nodes of the
// same image and move containerd's CNI directory.
func TestConfigNodes(t *testing.T) {
	one := (&Cluster{Name: "x", NodeImage: "img"}).config(false)
	if len(one.Nodes) != 1 || one.Nodes[0].Role != v1alpha4.ControlPlaneRole {
		t.Fatalf("single node: nodes %+v", one.Nodes)
	}
	if !reflect.DeepEqual(one.ContainerdConfigPatches, []string{containerdCgroupfs}) {
		t.Errorf("single node: containerd patches %q", one.ContainerdConfigPatches)
	}
	three := (&Cluster{Name: "x", NodeImage: "img", Workers: 2}).config(false)
	var roles []v1alpha4.NodeRole
	for _, n := range three.Nodes {
		roles = append(roles, n.Role)
		if n.Image != "img" {
			t.Errorf("node %s has image %q", n.Role, n.Image)
		}
	}
	if want := []v1alpha4.NodeRole{v1alpha4.ControlPlaneRole, v1alpha4.WorkerRole, v1alpha4.WorkerRole}; !reflect.DeepEqual(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}
	if !strings.Contains(strings.Join(three.ContainerdConfigPatches, "\n"), `conf_dir = "`+multiNodeCNIDir+`"`) {
		t.Errorf("multi-node: containerd patches %q do not move the CNI directory", three.ContainerdConfigPatches)
	}
	if three.Networking.PodSubnet != PodSubnet || !reflect.DeepEqual(three.KubeadmConfigPatches, one.KubeadmConfigPatches) {
		t.Errorf("multi-node: pod subnet %q, kubeadm patches differ: %v", three.Networking.PodSubnet, three.KubeadmConfigPatches)
	}
}

// TestPtpConflistFollowsTheBakedOne: a node's config is the baked one with
// its own range and without the plugin's masquerade.
func TestPtpConflistFollowsTheBakedOne(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "node", "10-ptp.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var baked, mine map[string]any
	if err := json.Unmarshal(raw, &baked); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(ptpConflist(netip.MustParsePrefix("10.244.2.0/24"))), &mine); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	ptp := baked["plugins"].([]any)[0].(map[string]any)
	if got := ptp["ipam"].(map[string]any)["ranges"].([]any)[0].([]any)[0].(map[string]any)["subnet"]; got != PodSubnet {
		t.Errorf("the baked config's range %v is not PodSubnet %s", got, PodSubnet)
	}
	ptp["ipMasq"] = false
	ptp["ipam"].(map[string]any)["ranges"] = []any{[]any{map[string]any{"subnet": "10.244.2.0/24"}}}
	if !reflect.DeepEqual(baked, mine) {
		t.Errorf("node config\n%v\nis not the baked one with its range and ipMasq false:\n%v", mine, baked)
	}
}

func TestNodeNetScript(t *testing.T) {
	all := []NodeNet{
		{Name: "c-control-plane", PodCIDR: netip.MustParsePrefix("10.244.0.0/24"), IP: netip.MustParseAddr("172.18.0.2")},
		{Name: "c-worker", PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), IP: netip.MustParseAddr("172.18.0.3")},
		{Name: "c-worker2", PodCIDR: netip.MustParsePrefix("10.244.2.0/24"), IP: netip.MustParseAddr("172.18.0.4")},
	}
	s, err := nodeNetScript(all[1], all)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"subnet": "10.244.1.0/24"`,
		"ip route replace 10.244.0.0/24 via 172.18.0.2\n",
		"ip route replace 10.244.2.0/24 via 172.18.0.4\n",
		`-t nat -A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -m comment`,
		`case " 10.244.0.0/24 10.244.2.0/24 " in`,
		"cd " + multiNodeCNIDir + "\n",
		"mv .10-ptp.conflist.tmp 10-ptp.conflist",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "10.244.1.0/24 via") {
		t.Errorf("script routes the node's own range away:\n%s", s)
	}
	bad := append([]NodeNet{}, all...)
	bad[2].PodCIDR = netip.MustParsePrefix("10.9.0.0/24")
	if _, err := nodeNetScript(all[1], bad); err == nil {
		t.Error("a range outside the pod subnet was accepted")
	}
}

func TestNetsOf(t *testing.T) {
	node := func(name, cidr string, addrs ...corev1.NodeAddress) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr},
			Status: corev1.NodeStatus{Addresses: addrs}}
	}
	in := corev1.NodeList{Items: []corev1.Node{
		node("b", "10.244.1.0/24", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "b"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.18.0.3"}),
		node("a", "10.244.0.0/24", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}),
		node("no-range-yet", "", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.18.0.4"}),
		node("no-address-yet", "10.244.3.0/24"),
	}}
	got := netsOf(&in)
	want := []NodeNet{
		{Name: "a", PodCIDR: netip.MustParsePrefix("10.244.0.0/24"), IP: netip.MustParseAddr("172.18.0.2")},
		{Name: "b", PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), IP: netip.MustParseAddr("172.18.0.3")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("netsOf = %+v, want %+v", got, want)
	}
}
