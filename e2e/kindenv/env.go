package kindenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Env is the whole e2e environment, built phase by phase. `make kind-up`
// runs every phase in order; the e2e suite's TestMain runs each as a Setup
// step. Fields are filled in as phases complete.
type Env struct {
	Root     string    // repository root
	Name     string    // kind cluster name
	Image    string    // the sandbox image, loaded into the cluster
	Standins Standins  // the metadata and internet stand-ins
	Log      io.Writer // progress and phase timings

	// Workers is how many worker nodes the cluster has besides its control
	// plane (WorkersEnv); 0 is one node that runs everything.
	Workers int

	NodeImage  string
	Bins       map[string]string // binary set name -> directory
	Cluster    *Cluster
	Kubeconfig string // a kubeconfig file for this cluster only
	Kubectl    Kubectl
	SandboxBin string // bin/sandbox, built from this tree
	// NodeName is the control-plane node's container: where the API server
	// runs, and on a single-node cluster the node of every pod. A test
	// that acts on the node of a pod takes the pod's spec.nodeName (the
	// container's name on kind).
	NodeName string
	// Nodes are every node's container, the control plane first: each is
	// attached to the stand-ins' networks.
	Nodes  []string
	Reused bool // CreateCluster found the cluster running and kept it
}

// NewEnv returns the default environment for the repository at root.
func NewEnv(root string, log io.Writer) *Env {
	return &Env{Root: root, Name: DefaultName, Image: "sandbox:dev", Standins: DefaultStandins, Log: log}
}

// Phase runs fn as a named phase, printing its start and duration.
func (e *Env) Phase(name string, fn func() error) error {
	start := time.Now()
	fmt.Fprintf(e.Log, "%s === phase %s\n", start.UTC().Format("15:04:05"), name)
	err := fn()
	d := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(e.Log, "=== phase %s FAILED after %s: %v\n", name, d, err)
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(e.Log, "=== phase %s done in %s\n", name, d)
	return nil
}

func (e *Env) scripts() Scripts { return Scripts{Root: e.Root, Progress: e.Log} }

// Host prepares the machine (packages, dockerd, the runc wrapper).
func (e *Env) Host(ctx context.Context) error {
	return e.Phase("host setup", func() error { return e.scripts().HostSetup(ctx) })
}

// Images builds or finds cached binaries, the node image and the sandbox
// image. The Debian root filesystems download while the binaries compile.
func (e *Env) Images(ctx context.Context) error {
	if err := e.Phase("binaries and root filesystems", func() error {
		rootfs := make(chan error, 1)
		go func() { rootfs <- e.scripts().RootFilesystems(ctx) }()
		var err error
		e.Bins, err = e.scripts().Binaries(ctx)
		return errors.Join(err, <-rootfs)
	}); err != nil {
		return err
	}
	if err := e.Phase("node image", func() (err error) {
		e.NodeImage, err = e.scripts().NodeImage(ctx)
		return err
	}); err != nil {
		return err
	}
	return e.Phase("sandbox image", func() error {
		// SANDBOX_E2E_SANDBOX_BIN names a prebuilt binary to use instead of
		// building bin/sandbox from this tree.
		if bin := os.Getenv("SANDBOX_E2E_SANDBOX_BIN"); bin != "" {
			e.SandboxBin = bin
			return e.scripts().SandboxImage(ctx, bin)
		}
		e.SandboxBin = filepath.Join(e.Root, "bin", "sandbox")
		return e.scripts().SandboxImage(ctx, "")
	})
}

// CreateCluster creates the kind cluster. An existing cluster of the same
// name is deleted first when fresh is set, and reused otherwise.
func (e *Env) CreateCluster(ctx context.Context, fresh bool) error {
	name := "cluster"
	if e.Workers > 0 {
		name = fmt.Sprintf("cluster (a control plane and %d workers)", e.Workers)
	}
	return e.Phase(name, func() error {
		e.Cluster = NewCluster(e.Name, e.NodeImage, e.Log)
		e.Cluster.Workers = e.Workers
		exists, err := e.Cluster.Exists()
		if err != nil {
			return err
		}
		if exists && fresh {
			fmt.Fprintf(e.Log, "deleting the existing cluster %q for a fresh one\n", e.Name)
			if err := e.Cluster.Delete(); err != nil {
				return err
			}
			exists = false
		}
		e.Reused = exists
		if exists {
			fmt.Fprintf(e.Log, "reusing the existing cluster %q\n", e.Name)
		} else if err := e.Cluster.Create(ctx); err != nil {
			return err
		}
		asked := e.Workers
		if err := e.useCluster(); err != nil {
			return err
		}
		// A reused cluster keeps its nodes; only a count asked for
		// explicitly must match them.
		if e.Workers != asked && (!exists || os.Getenv(WorkersEnv) != "") {
			return fmt.Errorf("the running cluster %q has %d workers, and %s asks for %d: delete it first (make kind-down)",
				e.Name, e.Workers, WorkersEnv, asked)
		}
		if exists && e.Workers > 0 {
			// A node restarted since lost its routes: set them again.
			return e.Cluster.PodNetwork(ctx)
		}
		return nil
	})
}

// Attach uses an existing cluster without creating anything.
func (e *Env) Attach() error {
	e.Cluster = NewCluster(e.Name, e.NodeImage, e.Log)
	exists, err := e.Cluster.Exists()
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("no kind cluster %q", e.Name)
	}
	return e.useCluster()
}

func (e *Env) useCluster() error {
	dir := filepath.Join(e.Root, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(dir, "kubeconfig-"+e.Name)
	if err := e.Cluster.WriteKubeconfig(e.Kubeconfig); err != nil {
		return err
	}
	cp, workers, err := e.Cluster.Nodes()
	if err != nil {
		return err
	}
	e.NodeName = cp
	e.Nodes = append([]string{cp}, workers...)
	e.Workers = len(workers)
	e.Cluster.Workers = len(workers)
	if k := e.Bins["kubernetes"]; k != "" {
		e.Kubectl = Kubectl{Path: filepath.Join(k, "kubectl"), Kubeconfig: e.Kubeconfig}
	}
	return nil
}

// LoadImages builds the sample agent image, tags it as EgressImage too, and
// loads it and the sandbox image into the nodes in one archive (they share
// the Debian base).
func (e *Env) LoadImages(ctx context.Context) error {
	return e.Phase("load "+e.Image+", "+AgentImage+", "+EgressImage, func() error {
		if err := e.scripts().AgentImage(ctx); err != nil {
			return err
		}
		if _, err := docker(ctx, "tag", AgentImage, EgressImage); err != nil {
			return err
		}
		return e.Cluster.LoadImages(ctx, e.Image, AgentImage, EgressImage)
	})
}

// StandinsUp starts the metadata and internet stand-ins and attaches every
// node.
func (e *Env) StandinsUp(ctx context.Context) error {
	return e.Phase("stand-ins", func() error { return e.Standins.Up(ctx, e.Image, e.Nodes...) })
}

// Deploy applies `sandbox manifests --image <image>`. Each node's address
// on the internet stand-in's network plays a node's public address, which
// no API object lists (kind's Node names only its address on kind's own
// network): the operator names them in --tool-egress-deny.
func (e *Env) Deploy(ctx context.Context) error {
	return e.Phase("deploy manifests", func() error {
		var deny []string
		for _, n := range e.Nodes {
			ip, err := e.Standins.Internet.NodeAddr(ctx, n)
			if err != nil {
				return err
			}
			deny = append(deny, ip+"/32")
		}
		return Deploy(ctx, e.Kubectl, e.SandboxBin, e.Image, "--tool-egress-deny", strings.Join(deny, ","))
	})
}

// Restart rolls the Deployment (after a rebuilt image under the same tag,
// which `kubectl apply` alone does not pick up) and waits for the rollout.
func (e *Env) Restart(ctx context.Context, timeout time.Duration) error {
	return e.Phase("restart deployment", func() error {
		if _, err := e.Kubectl.Run(ctx, nil, "-n", Namespace, "rollout", "restart", "deployment/"+Deployment); err != nil {
			return err
		}
		_, err := e.Kubectl.Run(ctx, nil, "-n", Namespace, "rollout", "status", "deployment/"+Deployment,
			fmt.Sprintf("--timeout=%s", timeout))
		return err
	})
}

// ImageID is the Docker image ID of the sandbox image, or "" if there is none.
func (e *Env) ImageID(ctx context.Context) string {
	id, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", e.Image)
	if err != nil {
		return ""
	}
	return id
}

// WaitAvailable waits for the sandbox Deployment to become Available.
func (e *Env) WaitAvailable(ctx context.Context, timeout time.Duration) error {
	return e.Phase("wait for deployment", func() error { return WaitAvailable(ctx, e.Kubectl, timeout) })
}

// Down deletes the stand-ins and the cluster.
func (e *Env) Down(ctx context.Context) error {
	return e.Phase("delete cluster", func() error {
		c := NewCluster(e.Name, "", e.Log)
		var nodes []string
		if ok, _ := c.Exists(); ok {
			if cp, workers, err := c.Nodes(); err == nil {
				nodes = append([]string{cp}, workers...)
			}
		}
		// The DNS canary first: it sits on the internet stand-in's network.
		serr := errors.Join(dnsCanaryDown(ctx), egressDown(ctx), e.Standins.Down(ctx, nodes...), privateStandinsDown(ctx, nodes...))
		if err := c.Delete(); err != nil {
			// A container cgroup that runc left frozen ("unable to freeze",
			// cgroup v1) cannot be killed, and so neither can the node:
			// thaw what is frozen under the nodes and try once more.
			if len(nodes) == 0 {
				return err
			}
			thawed := 0
			var terrs []error
			for _, node := range nodes {
				id, ierr := docker(ctx, "inspect", "--format", "{{.Id}}", node)
				if ierr != nil {
					continue
				}
				n, terr := thawFrozen(filepath.Join(freezerRoot, "docker", id))
				thawed += n
				terrs = append(terrs, terr)
			}
			fmt.Fprintf(e.Log, "delete cluster: %v; thawed %d frozen cgroups under the nodes (%v), trying again\n", err, thawed, errors.Join(terrs...))
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return serr
	})
}

// freezerRoot is the cgroup v1 freezer hierarchy, where Docker puts a
// container's cgroups under docker/<id>.
const freezerRoot = "/sys/fs/cgroup/freezer"

// thawFrozen writes THAWED to every freezer.state under dir that is FROZEN
// or FREEZING, and says how many it thawed. No freezer (cgroup v2) is no
// error.
func thawFrozen(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Name() != "freezer.state" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil //nolint:nilerr // a cgroup removed meanwhile
		}
		if st := strings.TrimSpace(string(b)); st != "FROZEN" && st != "FREEZING" {
			return nil
		}
		if err := os.WriteFile(path, []byte("THAWED"), 0); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}

// Vars are the environment's addresses as environment variables, the form
// `make kind-up` prints and the suite sets: the stand-ins as host:port and
// the kubeconfig path.
func (e *Env) Vars() map[string]string {
	return map[string]string{
		"SANDBOX_E2E_METADATA_ADDR": e.Standins.Metadata.IP + ":80",
		"SANDBOX_E2E_INTERNET_ADDR": e.Standins.Internet.IP + ":80",
		"SANDBOX_E2E_KUBECONFIG":    e.Kubeconfig,
		"SANDBOX_E2E_DNS_ZONE":      DNSCanaryZone,
		"SANDBOX_E2E_DNS_ANSWER":    DNSCanaryIP,
	}
}
