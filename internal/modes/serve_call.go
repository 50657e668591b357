package modes

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/toolpod"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// ToolFlags are serve's settings for tool calls (POST /v1/call); ServeCmd
// embeds them. Without --tool-images the path is not served.
type ToolFlags struct {
	ToolImages        []string      `name:"tool-images" env:"SANDBOX_TOOL_IMAGES" sep:";" placeholder:"IMAGE[=EGRESS]" help:"Images tool calls may run: exact references, or prefixes ending in / or * (registry.example/agents/), separated by ; (or commas between images given no egress). IMAGE=EGRESS gives one its egress: none, internet, or names it may reach through the egress gateway (api.example.com,*.example.org,host:8443; ports 443 and 80 otherwise). Empty: no /v1/call (404)."`
	ToolDefaultEgress string        `name:"tool-default-egress" env:"SANDBOX_TOOL_DEFAULT_EGRESS" enum:"internet,none" default:"internet" help:"Egress of an image --tool-images gives none: internet (every public address) or none (nothing, not even DNS)."`
	EgressGateway     string        `name:"egress-gateway" env:"SANDBOX_EGRESS_GATEWAY" default:"${egress_service}" help:"The egress gateway's Service in the namespace, which tool pods with names reach the internet through."`
	EgressGatewayPort int           `name:"egress-gateway-port" env:"SANDBOX_EGRESS_GATEWAY_PORT" default:"${egress_port}" help:"The gateway Service's proxy port."`
	ToolEnvDeny       []string      `name:"tool-env-deny" env:"SANDBOX_TOOL_ENV_DENY" sep:"," default:"${tool_env_deny}" placeholder:"GLOB" help:"Request env names refused with 400 (globs, case ignored)."`
	ToolInternet      bool          `name:"tool-internet-egress" env:"SANDBOX_TOOL_INTERNET_EGRESS" default:"true" negatable:"" help:"Tool pods may reach the internet (never private ranges or metadata); --no-tool-internet-egress leaves them DNS only."`
	ToolEgressDeny    []string      `name:"tool-egress-deny" env:"SANDBOX_TOOL_EGRESS_DENY" sep:"," placeholder:"CIDR" help:"Prefixes tool pods must never reach besides the private ranges and every node's and API server endpoint's address, which serve fences off itself: your machines' addresses no API object lists."`
	ToolPython        string        `name:"tool-python" env:"SANDBOX_TOOL_PYTHON" placeholder:"PATH" help:"Interpreter in the agent's image (default python3 on its PATH)."`
	ToolReadyTimeout  time.Duration `name:"tool-ready-timeout" env:"SANDBOX_TOOL_READY_TIMEOUT" default:"${tool_ready_timeout}" help:"How long a call waits for its pod to be Ready (scheduling, image pull) before 504."`
	ToolMaxConcurrent int           `name:"tool-max-concurrent" env:"SANDBOX_TOOL_MAX_CONCURRENT" default:"${tool_max_concurrent}" help:"Tool pods this replica runs at once; more calls wait up to 30 s, then 503."`
}

// Setting names, as the refusals quote them.
const (
	toolImagesSetting  = "--tool-images / SANDBOX_TOOL_IMAGES"
	toolEnvDenySetting = "--tool-env-deny / SANDBOX_TOOL_ENV_DENY"
)

// images parses --tool-images.
func (t *ToolFlags) images() (egress.Images, error) {
	ims, err := egress.ParseImages(t.ToolImages)
	if err != nil {
		return nil, fmt.Errorf("--tool-images: %w", err)
	}
	if err := api.ValidateImagePatterns(ims.Patterns()); err != nil {
		return nil, fmt.Errorf("--tool-images: %w", err)
	}
	return ims, nil
}

func (t *ToolFlags) validate() error {
	if _, err := t.images(); err != nil {
		return err
	}
	if _, err := egress.Parse(t.ToolDefaultEgress); err != nil {
		return fmt.Errorf("--tool-default-egress: %w", err)
	}
	if t.EgressGatewayPort < 1 || t.EgressGatewayPort > 65535 {
		return fmt.Errorf("--egress-gateway-port %d: not a port", t.EgressGatewayPort)
	}
	if err := api.ValidateEnvDeny(t.ToolEnvDeny); err != nil {
		return fmt.Errorf("--tool-env-deny: %w", err)
	}
	if t.ToolReadyTimeout <= 0 {
		return fmt.Errorf("--tool-ready-timeout %s: must be positive", t.ToolReadyTimeout)
	}
	if t.ToolMaxConcurrent < 1 {
		return fmt.Errorf("--tool-max-concurrent %d: must be at least 1", t.ToolMaxConcurrent)
	}
	if _, err := kube.ParsePrefixes(t.ToolEgressDeny); err != nil {
		return fmt.Errorf("--tool-egress-deny: %w", err)
	}
	return nil
}

// newToolCaller builds the tool-call side of the Kubernetes backend, or
// nothing when no image is allowed. The returned func stops its janitor and
// waits for the calls in flight; call it after the server has drained.
func newToolCaller(f *KubeFlags, t *ToolFlags, log *slog.Logger) (server.Caller, api.CallPolicy, func(), error) {
	policy := api.CallPolicy{EnvDeny: t.ToolEnvDeny, ImagesSetting: toolImagesSetting, EnvDenySetting: toolEnvDenySetting}
	if len(t.ToolImages) == 0 {
		return nil, policy, func() {}, nil
	}
	if err := t.validate(); err != nil {
		return nil, policy, nil, err
	}
	images, _ := t.images() // validate has refused a bad one
	def, _ := egress.Parse(t.ToolDefaultEgress)
	policy.Images = images.Patterns()
	policy.EgressOf = func(image string) string {
		e, _ := images.For(image, def)
		return e.String()
	}
	weakened, err := weaken.Parse(f.Weaken, false)
	if err != nil {
		return nil, policy, nil, fmt.Errorf("--weaken: %w", err)
	}
	ns, owner := f.placement()
	sealOpts, err := f.osSealOptions()
	if err != nil {
		return nil, policy, nil, err
	}
	client, err := kube.NewClient(f.Kubeconfig, "sandbox-serve")
	if err != nil {
		return nil, policy, nil, err
	}
	var fence *toolpod.Fence
	if t.ToolInternet {
		deny, _ := kube.ParsePrefixes(t.ToolEgressDeny) // validate has refused a bad one
		fence = toolpod.NewFence(toolpod.FenceOptions{Client: client, Namespace: ns, Extra: deny, Logger: log,
			Off: weakened.Has(weaken.Unfenced)})
	}
	// The gateway is watched only when some image reaches names through it.
	var gateway *toolpod.Gateway
	if slices.ContainsFunc(images, func(im egress.Image) bool { return im.Given && im.Egress.Mode == egress.Names }) {
		gateway = toolpod.NewGateway(client, ns, t.EgressGateway, t.EgressGatewayPort)
	}
	c, err := toolpod.New(toolpod.Options{
		Client:        client,
		Namespace:     ns,
		Fence:         fence,
		Images:        images,
		DefaultEgress: def,
		Gateway:       gateway,
		Pod: kube.ToolPodOptions{
			SandboxImage: f.Image,
			RuntimeClass: f.RuntimeClass,
			RunnerPort:   int32(f.RunnerPort),
			Owner:        owner,
			Python:       t.ToolPython,
			Internet:     t.ToolInternet,
			CPURequest:   f.CPURequest,
			Seal:         sealOpts,
			Weaken:       weakened,
		},
		ReadyTimeout:  t.ToolReadyTimeout,
		MaxConcurrent: t.ToolMaxConcurrent,
		Logger:        log,
	})
	if err != nil {
		return nil, policy, nil, err
	}
	egressOf := make([]string, len(images))
	for i, im := range images {
		e, _ := images.For(im.Pattern, def)
		egressOf[i] = im.Pattern + "=" + e.String()
	}
	log.Info("tool calls enabled", "images", egressOf, "default_egress", def.String(), "egress_gateway", gateway != nil, "internet_egress", t.ToolInternet, "egress_deny", t.ToolEgressDeny, "env_deny", t.ToolEnvDeny)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var watchers sync.WaitGroup
	if fence != nil {
		watchers.Go(func() { fence.Run(ctx) })
	}
	if gateway != nil {
		watchers.Go(func() { gateway.Run(ctx) })
	}
	go func() {
		defer close(done)
		defer watchers.Wait()
		if err := c.Run(ctx); err != nil {
			log.Error("tool pod janitor stopped", "err", err)
		}
	}()
	var once sync.Once
	return c, policy, func() { once.Do(func() { cancel(); <-done }) }, nil
}
