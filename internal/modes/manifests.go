package modes

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandbox/internal/manifests"
)

// ManifestsCmd prints the manifests that deploy the service, for
// `sandbox manifests --image ... | kubectl apply -f -`.
type ManifestsCmd struct {
	Image             string        `default:"${image}" env:"SANDBOX_IMAGE" help:"Image of the service and of its sandbox pods."`
	Namespace         string        `default:"${namespace}" help:"Namespace to deploy into (created, with Pod Security restricted)."`
	PoolSize          int           `name:"pool-size" default:"${pool_size}" help:"Warm sandbox pods the service keeps Ready: the floor."`
	PoolMax           int           `name:"pool-max" help:"The most unclaimed sandbox pods a replica grows to under demand (default ${pool_max_factor} × --pool-size)."`
	RuntimeClass      string        `name:"runtime-class" help:"runtimeClassName of sandbox pods (e.g. gvisor); empty keeps the cluster default."`
	PodCPURequest     string        `name:"pod-cpu-request" help:"CPU request of sandbox pods, below their ${snippet_cpu}-CPU limit (default: equal to it). Lower it on small nodes (a 2-CPU kind node holds one 1-CPU pod)."`
	APIServerCIDRs    []string      `name:"api-server-cidr" default:"${api_server_cidrs}" sep:"," help:"Addresses the service may reach the API server at (its Service IP and endpoints), for its NetworkPolicy. The default fits kind."`
	ToolImages        []string      `name:"tool-images" sep:";" placeholder:"IMAGE[=EGRESS]" help:"Images tool calls (POST /v1/call) may run: exact, or prefixes ending in / or *, separated by ; each with its egress if given (serve's --tool-images). Empty: /v1/call is off."`
	ToolReadyTimeout  time.Duration `name:"tool-ready-timeout" help:"How long a tool call waits for its pod to be Ready (default ${tool_ready_timeout})."`
	ToolInternet      bool          `name:"tool-internet-egress" default:"true" negatable:"" help:"Tool pods may reach the internet, never private ranges or metadata (--no-tool-internet-egress: DNS only)."`
	ToolEgressDeny    []string      `name:"tool-egress-deny" sep:"," placeholder:"CIDR" help:"Prefixes of your machines that no API object lists (a node's public address on another interface), kept out of tool pods' internet with every node's and API server endpoint's address."`
	ToolDefaultEgress string        `name:"tool-default-egress" enum:"internet,none" default:"internet" help:"Egress of a tool image given none (serve's --tool-default-egress)."`
	EgressPermit      []string      `name:"egress-permit" sep:"," placeholder:"CIDR" help:"Addresses the egress gateway dials despite their range: a test rig's stand-ins, never production."`
	SnippetDNS        string        `name:"snippet-dns" enum:"${snippet_dns_modes}" default:"${snippet_dns}" help:"DNS of snippet pods (SANDBOX_SNIPPET_DNS): sealed answers every lookup inside the pod and lets nothing out; cluster uses the cluster DNS, which forwards outside names upstream."`
}

// Run renders and prints the manifests.
func (c *ManifestsCmd) Run(d *Deps) error {
	out, err := manifests.Render(manifests.Options{
		Namespace:         c.Namespace,
		Image:             c.Image,
		PoolSize:          c.PoolSize,
		PoolMax:           c.PoolMax,
		RuntimeClass:      c.RuntimeClass,
		PodCPURequest:     c.PodCPURequest,
		APIServerCIDRs:    c.APIServerCIDRs,
		ToolImages:        c.ToolImages,
		NoToolInternet:    !c.ToolInternet,
		ToolEgressDeny:    c.ToolEgressDeny,
		ToolReadyTimeout:  c.ToolReadyTimeout,
		SnippetDNS:        c.SnippetDNS,
		ToolDefaultEgress: c.ToolDefaultEgress,
		EgressPermit:      c.EgressPermit,
	})
	if err != nil {
		return fmt.Errorf("render manifests: %w", err)
	}
	_, err = d.Stdout.Write(out)
	return err
}
