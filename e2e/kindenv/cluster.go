package kindenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/sandboxd/sandbox/internal/kube"
)

const (
	// DefaultName is the cluster name shared with the manifests and verify.
	DefaultName = "sandbox"
	// PodSubnet must match the host-local range in e2e/node/10-ptp.conflist,
	// which is baked into the node image (the single-node cluster's; a
	// multi-node one splits it per node: see PodNetwork).
	PodSubnet = "10.244.0.0/16"
)

// Cluster is one kind cluster driven through the kind library.
type Cluster struct {
	Name      string
	NodeImage string
	// Workers is how many worker nodes Create makes besides the control
	// plane; 0 is one node that runs everything.
	Workers  int
	provider *kindcluster.Provider
}

// NewCluster returns a handle on the kind cluster name using Docker; kind's
// progress goes to log.
func NewCluster(name, nodeImage string, log io.Writer) *Cluster {
	return &Cluster{
		Name:      name,
		NodeImage: nodeImage,
		provider:  kindcluster.NewProvider(kindcluster.ProviderWithDocker(), kindcluster.ProviderWithLogger(newLogger(log))),
	}
}

// Exists reports whether the cluster's nodes exist.
func (c *Cluster) Exists() (bool, error) {
	names, err := c.provider.List()
	if err != nil {
		return false, fmt.Errorf("list kind clusters: %w", err)
	}
	return slices.Contains(names, c.Name), nil
}

// containerdCgroupfs has runc use the kubelet's cgroup driver.
const containerdCgroupfs = `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
`

// config is the cluster's kind configuration: one node of our offline image
// (or a control plane and c.Workers workers), the pod range our baked CNI
// config serves, and kubelet settings.
func (c *Cluster) config(cgroupV1 bool) *v1alpha4.Cluster {
	// The kubelet and runc manage cgroups themselves (cgroupfs), not through
	// the node's systemd: on cgroup v1, runc's systemd driver freezes each
	// new container to set its unit's properties, and on a busy node that
	// freeze fails ("unable to freeze") and the container never starts.
	kubelet := "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n" +
		"cgroupDriver: cgroupfs\n" +
		fmt.Sprintf("podPidsLimit: %d\n", kube.DefaultPodPidsLimit)
	if cgroupV1 {
		// Kubernetes 1.35+ refuses cgroup v1 unless told otherwise.
		kubelet += "failCgroupV1: false\n"
	}
	// The node image holds kubeadm patches for the control plane's static
	// pods (their CPU request: see CONTROL_PLANE_CPU_REQUEST in hack/lib.sh).
	controlPlane := "kind: InitConfiguration\npatches:\n  directory: /kind/kubeadm-patches\n"
	cfg := &v1alpha4.Cluster{
		TypeMeta:                v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:                    c.Name,
		Nodes:                   []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole, Image: c.NodeImage}},
		Networking:              v1alpha4.Networking{PodSubnet: PodSubnet},
		KubeadmConfigPatches:    []string{kubelet, controlPlane},
		ContainerdConfigPatches: []string{containerdCgroupfs},
	}
	if c.Workers > 0 {
		// The control plane keeps kubeadm's NoSchedule taint (kind lifts
		// it on one node only): it runs the system, the workers run ours,
		// so that losing a worker takes none of the control plane with it.
		for range c.Workers {
			cfg.Nodes = append(cfg.Nodes, v1alpha4.Node{Role: v1alpha4.WorkerRole, Image: c.NodeImage})
		}
		cfg.ContainerdConfigPatches = append(cfg.ContainerdConfigPatches, containerdMultiNodeCNI)
	}
	v1alpha4.SetDefaultsCluster(cfg)
	return cfg
}

// Create creates the cluster and waits for its nodes to be Ready (on more
// than one node, after PodNetwork configured their pod network). The
// kubeconfig is merged into the default one ($KUBECONFIG or ~/.kube/config)
// as context kind-<name>, as the kind CLI does.
func (c *Cluster) Create(ctx context.Context) error {
	v1, err := dockerCgroupV1(ctx)
	if err != nil {
		return err
	}
	// Nodes of a multi-node cluster are not Ready before PodNetwork: kind
	// must not wait for that.
	ready := 3 * time.Minute
	if c.Workers > 0 {
		ready = 0
	}
	done := make(chan error, 1)
	go func() {
		done <- c.provider.Create(c.Name,
			kindcluster.CreateWithV1Alpha4Config(c.config(v1)),
			kindcluster.CreateWithWaitForReady(ready),
			kindcluster.CreateWithDisplayUsage(false),
			kindcluster.CreateWithDisplaySalutation(false),
		)
	}()
	// kind's Create takes no context; if ours ends first, we still wait for
	// it so that nothing outlives the call, then report the context's error.
	select {
	case err = <-done:
	case <-ctx.Done():
		err = <-done
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("create kind cluster %q: %w", c.Name, err)
	}
	if c.Workers > 0 {
		if err := c.PodNetwork(ctx); err != nil {
			return fmt.Errorf("create kind cluster %q: %w", c.Name, err)
		}
	}
	return nil
}

// Delete removes the cluster and its kubeconfig context.
func (c *Cluster) Delete() error {
	if err := c.provider.Delete(c.Name, ""); err != nil {
		return fmt.Errorf("delete kind cluster %q: %w", c.Name, err)
	}
	return nil
}

// WriteKubeconfig writes the cluster's kubeconfig to path.
func (c *Cluster) WriteKubeconfig(path string) error {
	kc, err := c.provider.KubeConfig(c.Name, false)
	if err != nil {
		return fmt.Errorf("kubeconfig of %q: %w", c.Name, err)
	}
	return os.WriteFile(path, []byte(kc), 0o600)
}

// ControlPlane returns the Docker container name of the control-plane node.
func (c *Cluster) ControlPlane() (string, error) {
	nodes, err := c.provider.ListInternalNodes(c.Name)
	if err != nil {
		return "", fmt.Errorf("list nodes of %q: %w", c.Name, err)
	}
	cp, err := nodeutils.BootstrapControlPlaneNode(nodes)
	if err != nil {
		return "", err
	}
	return cp.String(), nil
}

// LoadImages copies Docker images into every node's containerd, as `kind
// load docker-image` does, in one archive: the images share their base
// layers, which a save of each would write (and a node import) once per
// image. A node that already holds every image at its Docker ID is left
// alone, as kind does, so that a reused cluster reloads only what changed.
func (c *Cluster) LoadImages(ctx context.Context, images ...string) error {
	nodes, err := c.provider.ListInternalNodes(c.Name)
	if err != nil {
		return fmt.Errorf("list nodes of %q: %w", c.Name, err)
	}
	ids := make(map[string]string, len(images))
	for _, image := range images {
		id, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", image)
		if err != nil {
			return fmt.Errorf("docker image inspect %s: %w", image, err)
		}
		ids[image] = strings.TrimSpace(id)
	}
	for _, n := range nodes {
		var missing []string
		for _, image := range images {
			if id, err := nodeutils.ImageID(n, image); err != nil || id != ids[image] {
				missing = append(missing, image)
			}
		}
		if len(missing) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		save := dockerSave(ctx, missing...)
		err := nodeutils.LoadImageArchive(n, save)
		cerr := save.Close()
		cancel()
		if err != nil {
			return fmt.Errorf("load %s into %s: %w", strings.Join(missing, ", "), n, err)
		}
		if cerr != nil {
			return fmt.Errorf("docker save %s: %w", strings.Join(missing, ", "), cerr)
		}
	}
	return nil
}

func dockerCgroupV1(ctx context.Context) (bool, error) {
	out, err := cmd{name: "docker", args: []string{"info", "--format", "{{.CgroupVersion}}"}, timeout: 30 * time.Second}.output(ctx)
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(out) == "1", nil
}
