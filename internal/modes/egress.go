package modes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/manifests"
	"github.com/sandboxd/sandbox/internal/toolpod"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// EgressCmd is `sandbox egress`, the egress gateway: tool pods whose image
// has names to reach go out through it and nowhere else.
type EgressCmd struct {
	Listen         string   `default:":${egress_port}" env:"SANDBOX_EGRESS_LISTEN" help:"Address of the proxy (HTTP CONNECT and absolute-form HTTP)."`
	AdminListen    string   `name:"admin-listen" default:":9090" env:"SANDBOX_EGRESS_ADMIN_LISTEN" help:"Address of /healthz, /readyz (Ready once the tool pods are listed) and /metrics."`
	Namespace      string   `env:"SANDBOX_NAMESPACE" help:"Namespace of the tool pods (default: this pod's namespace in a cluster, else ${namespace})."`
	Kubeconfig     string   `env:"KUBECONFIG" help:"Kubeconfig outside a cluster (default: in-cluster config)."`
	Deny           []string `name:"deny" sep:"," env:"SANDBOX_EGRESS_DENY" placeholder:"CIDR" help:"Addresses never dialled whatever a name resolves to, beside the private, shared, loopback, link-local, metadata, multicast and reserved ranges, which are always refused: your nodes' and API server's public addresses."`
	Permit         []string `name:"permit" sep:"," env:"SANDBOX_EGRESS_PERMIT" placeholder:"CIDR" help:"Addresses dialled despite their range (a test rig's stand-ins). Never in production: an address here is reachable by any tool whose list names a host that resolves to it."`
	MaxConnsPerPod int      `name:"max-conns-per-pod" default:"${egress_max_conns}" env:"SANDBOX_EGRESS_MAX_CONNS_PER_POD" help:"Connections one tool pod holds at once through the gateway."`
	MaxBytesOut    int64    `name:"max-bytes-out-per-pod" default:"${egress_max_bytes_out}" env:"SANDBOX_EGRESS_MAX_BYTES_OUT_PER_POD" help:"Bytes one tool pod sends out through the gateway over its life."`
	LogFormat      string   `name:"log-format" enum:"text,json" default:"json" env:"SANDBOX_LOG_FORMAT" help:"Log format on stderr."`
	LogLevel       string   `name:"log-level" enum:"debug,info,warn,error" default:"info" help:"Least severe log level shown."`

	// For the e2e suite's negative tests only: see package weaken.
	Weaken []string `name:"weaken" env:"SANDBOX_WEAKEN" sep:"," hidden:"" placeholder:"NAME" help:"Weaken the gateway on purpose (${weaken_gateway}), to show that verify catches it. Never in production."`
}

// Validate checks the flags kong cannot.
func (c *EgressCmd) Validate() error {
	for name, list := range map[string][]string{"--deny": c.Deny, "--permit": c.Permit} {
		if _, err := kube.ParsePrefixes(list); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if _, err := weaken.ParseGateway(c.Weaken); err != nil {
		return fmt.Errorf("--weaken: %w", err)
	}
	if c.MaxConnsPerPod < 1 {
		return fmt.Errorf("--max-conns-per-pod %d: must be at least 1", c.MaxConnsPerPod)
	}
	if c.MaxBytesOut < 1 {
		return fmt.Errorf("--max-bytes-out-per-pod %d: must be at least 1", c.MaxBytesOut)
	}
	return nil
}

// Run serves the proxy and the admin endpoints until SIGTERM.
func (c *EgressCmd) Run(d *Deps) error {
	log, err := (&ServeCmd{LogFormat: c.LogFormat, LogLevel: c.LogLevel}).logger(d.Stderr, "")
	if err != nil {
		return err
	}
	ns := c.Namespace
	if ns == "" {
		ns = kube.InClusterNamespace()
	}
	if ns == "" {
		ns = manifests.DefaultNamespace
	}
	deny, _ := kube.ParsePrefixes(c.Deny) // Validate has refused a bad one
	permit, _ := kube.ParsePrefixes(c.Permit)
	client, err := kube.NewClient(c.Kubeconfig, "sandbox-egress")
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var gw *egress.Gateway
	pods := egress.NewPods(client, ns, func(n int) {
		if gw != nil {
			gw.PodCount(n)
		}
	})
	weakened, _ := weaken.ParseGateway(c.Weaken)
	if names := weakened.Names(false); names != nil {
		log.Warn("egress gateway deliberately weakened for verify's negative tests", "weaken", names)
	}
	fenced := egress.NewFenced(client, ns, toolpod.InternetPolicy)
	gw, err = egress.New(egress.Options{Sources: pods, Deny: deny, Permit: permit, Weaken: weakened, Fenced: fenced.Prefixes,
		MaxConnsPerPod: c.MaxConnsPerPod, MaxBytesOutPerPod: c.MaxBytesOut, Logger: log.With("component", "egress")})
	if err != nil {
		return err
	}
	if err := gw.RegisterMetrics(reg); err != nil {
		return err
	}
	// Both listeners are bound before anything is served.
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.Listen, err)
	}
	adminLn, err := net.Listen("tcp", c.AdminListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen %s: %w", c.AdminListen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !pods.Synced() || !fenced.Synced() {
			http.Error(w, "tool pods or the fenced addresses not listed yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	admin := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, cancel := context.WithCancel(d.Ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { pods.Run(ctx) })
	wg.Go(func() { fenced.Run(ctx) })
	wg.Go(func() {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = admin.Shutdown(sctx)
	})
	adminErr := make(chan error, 1)
	wg.Go(func() {
		if err := admin.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			adminErr <- err
			cancel()
		}
	})
	log.Info("sandbox egress", "version", version, "listen", ln.Addr().String(), "admin", adminLn.Addr().String(), "namespace", ns,
		"deny", c.Deny, "permit", c.Permit, "max_conns_per_pod", c.MaxConnsPerPod, "max_bytes_out_per_pod", c.MaxBytesOut)
	if len(permit) > 0 {
		log.Warn("--permit lets tools reach addresses outside the internet; it is for test rigs", "permit", c.Permit)
	}
	err = gw.Serve(ctx, ln)
	cancel()
	wg.Wait()
	select {
	case e := <-adminErr:
		return fmt.Errorf("admin server: %w", e)
	default:
	}
	return err
}
