package modes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/manifests"
	"github.com/sandboxd/sandbox/internal/pool"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// KubeFlags are serve's flags for the Kubernetes backend; ServeCmd embeds
// them. In the cluster the Deployment sets them through the environment.
type KubeFlags struct {
	Namespace     string        `env:"SANDBOX_NAMESPACE" help:"Namespace of the sandbox pods (default: this pod's namespace in a cluster, else ${namespace})."`
	Image         string        `default:"${image}" env:"SANDBOX_IMAGE" help:"Image of the sandbox pods (python3 and this binary)."`
	PoolSize      int           `name:"pool-size" default:"${pool_size}" env:"SANDBOX_POOL_SIZE" help:"Ready, unclaimed sandbox pods always kept: the warm pool's floor."`
	PoolMax       int           `name:"pool-max" env:"SANDBOX_POOL_MAX" help:"The most unclaimed sandbox pods (Ready or starting) the pool grows to under demand (default ${pool_max_factor} × --pool-size). It bounds what a flood of requests can start."`
	PoolWait      time.Duration `name:"pool-wait" default:"${pool_wait}" env:"SANDBOX_POOL_WAIT" help:"How long a request waits for a Ready pod before 503."`
	RuntimeClass  string        `name:"runtime-class" env:"SANDBOX_RUNTIME_CLASS" help:"runtimeClassName of sandbox pods (e.g. gvisor); empty keeps the cluster default."`
	RunnerPort    int           `name:"runner-port" default:"${runner_port}" help:"Port of the runner in sandbox pods."`
	PodPidsLimit  int64         `name:"pod-pids-limit" default:"${pod_pids_limit}" env:"SANDBOX_POD_PIDS_LIMIT" help:"The kubelet's podPidsLimit where sandbox pods run: their runner keeps the snippet's process limit below it (0: unknown, trust the container's own limit)."`
	CPURequest    string        `name:"pod-cpu-request" env:"SANDBOX_POD_CPU_REQUEST" help:"CPU request of sandbox pods, below their ${snippet_cpu}-CPU limit (default: equal to it). Lower it on small nodes so the warm pool fits."`
	PodName       string        `name:"pod-name" env:"POD_NAME" help:"This serve pod's name (downward API): the owner of the sandbox pods (default: the host name)."`
	PodUID        string        `name:"pod-uid" env:"POD_UID" help:"This serve pod's UID (downward API): sandbox pods get an ownerReference to it."`
	Kubeconfig    string        `type:"path" help:"Kubeconfig file (default: in-cluster config, else KUBECONFIG or ~/.kube/config)."`
	SnippetDNS    string        `name:"snippet-dns" enum:"${snippet_dns_modes}" default:"${snippet_dns}" env:"SANDBOX_SNIPPET_DNS" help:"DNS of snippet pods: sealed (the pod's runner answers every name NXDOMAIN at once and nothing leaves the pod; its NetworkPolicy allows no egress) or cluster (the cluster DNS, which forwards outside names upstream: a channel out). The manifests' policies follow the pods' label."`
	SealProbe     []string      `name:"seal-probe" sep:"," env:"SANDBOX_SEAL_PROBE" placeholder:"HOST:PORT" help:"Addresses sandbox pods must find cut (refused or silent) before they are Ready (default inside a cluster: the API server's Service, KUBERNETES_SERVICE_HOST:PORT). Required outside one."`
	PreloadAlways bool          `name:"preload-always" env:"SANDBOX_PRELOAD_ALWAYS" help:"Snippet pods import the --preload even while their node is busy; by default each module waits until the node's CPUs were idle for a CPU's worth (the local backend's never waits)."`
	Preload       string        `default:"${preload}" env:"SANDBOX_PRELOAD" placeholder:"MODULES" help:"Modules (comma-separated) the snippet's pre-started python3 imports while it waits for its job, after its pod is Ready, so that a snippet's imports of them are free; \"\" for none. The local backend names at start those its python3 lacks."`
	SealDNS       []string      `name:"seal-dns" sep:"," env:"SANDBOX_SEAL_DNS" placeholder:"HOST:PORT" help:"The cluster DNS, which sealed snippet pods must get no answer from before they are Ready (default inside a cluster: the nameservers of serve's own resolv.conf)."`

	// For the e2e suite's negative tests only: see package weaken.
	Weaken []string `name:"weaken" env:"SANDBOX_WEAKEN" sep:"," hidden:"" placeholder:"NAME" help:"Weaken the sandbox pods on purpose (${weaken_serve}), to show that verify's checks can fail. Never in production."`
}

// newKubeBackend builds the warm-pool backend and starts it. The returned
// func stops the pool -- no new claims, runs in flight finish, warm pods are
// deleted -- and waits for it; call it after the HTTP server has drained.
// The pool logs to log, serve's logger, so --log-level and --log-format
// apply to it too.
func newKubeBackend(f *KubeFlags, log *slog.Logger) (server.Backend, func(), error) {
	switch {
	case f.PoolSize < 1:
		return nil, nil, fmt.Errorf("--pool-size %d: must be at least 1", f.PoolSize)
	case f.PoolMax < 0 || f.PoolMax > 0 && f.PoolMax < f.PoolSize:
		return nil, nil, fmt.Errorf("--pool-max %d: must be at least --pool-size (%d), or 0 for %d × it", f.PoolMax, f.PoolSize, pool.DefaultMaxFactor)
	case f.PoolWait <= 0:
		return nil, nil, fmt.Errorf("--pool-wait %s: must be positive", f.PoolWait)
	case f.RunnerPort < 1 || f.RunnerPort > 65535:
		return nil, nil, fmt.Errorf("--runner-port %d: not a port", f.RunnerPort)
	case f.Image == "":
		return nil, nil, errors.New("--image: required")
	}
	if err := kube.ValidateCPURequest(f.CPURequest); err != nil {
		return nil, nil, fmt.Errorf("--pod-cpu-request: %w", err)
	}
	preload, err := exec.ParsePreload(f.Preload)
	if err != nil {
		return nil, nil, fmt.Errorf("--preload: %w", err)
	}
	if err := kube.ValidateDNS(f.SnippetDNS); err != nil {
		return nil, nil, fmt.Errorf("--snippet-dns: %w", err)
	}
	sealOpts, err := f.osSealOptions()
	if err != nil {
		return nil, nil, err
	}
	if f.SnippetDNS != kube.DNSCluster && len(sealOpts.DNS) == 0 {
		log.Warn("no cluster DNS known (--seal-dns): sealed snippet pods prove only the API server cut")
	}
	weakened, err := weaken.Parse(f.Weaken, false)
	if err != nil {
		return nil, nil, fmt.Errorf("--weaken: %w", err)
	}
	ns, owner := f.placement()
	client, err := kube.NewClient(f.Kubeconfig, "sandbox-serve")
	if err != nil {
		return nil, nil, err
	}
	if names := weakened.Names(false); names != nil {
		log.Warn("sandbox pods deliberately weakened for verify's negative tests", "weaken", names)
	}
	p, err := pool.New(pool.Options{
		Client:    client,
		Namespace: ns,
		Pod: kube.PodOptions{
			Image:         f.Image,
			RuntimeClass:  f.RuntimeClass,
			RunnerPort:    int32(f.RunnerPort),
			Owner:         owner,
			CPURequest:    f.CPURequest,
			PidsLimit:     f.PodPidsLimit,
			DNS:           f.SnippetDNS,
			Seal:          sealOpts,
			Preload:       preload,
			PreloadAlways: f.PreloadAlways,
			Weaken:        weakened,
		},
		Size:   f.PoolSize,
		Max:    f.PoolMax,
		Wait:   f.PoolWait,
		Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}

	// The pool's life is not d.Ctx: on SIGTERM the server drains first, and
	// the pool must keep serving the runs in flight until cleanup is called.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			log.Error("warm pool stopped", "err", err)
		}
	}()
	var once sync.Once
	cleanup := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	return p, cleanup, nil
}

// placement is the namespace serve's pods go in (the flag, else serve's own
// namespace, else the default) and the serve pod that owns them.
func (f *KubeFlags) placement() (string, kube.Owner) {
	ns := f.Namespace
	if ns == "" {
		ns = kube.InClusterNamespace()
	}
	if ns == "" {
		ns = manifests.DefaultNamespace
	}
	owner := kube.Owner{Name: f.PodName}
	if f.PodName != "" && f.PodUID != "" {
		owner.UID = types.UID(f.PodUID)
	}
	return ns, owner
}
