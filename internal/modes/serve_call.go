package modes

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/toolpod"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// ToolFlags are serve's settings for tool calls (POST /v1/call); ServeCmd
// embeds them. Without --tool-images the path is not served.
type ToolFlags struct {
	ToolImages        []string      `name:"tool-images" env:"SANDBOX_TOOL_IMAGES" sep:"," placeholder:"IMAGE" help:"Images tool calls may run: exact references, or prefixes ending in / or * (registry.example/agents/). Empty: no /v1/call (404)."`
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

func (t *ToolFlags) validate() error {
	if err := api.ValidateImagePatterns(t.ToolImages); err != nil {
		return fmt.Errorf("--tool-images: %w", err)
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
	policy := api.CallPolicy{Images: t.ToolImages, EnvDeny: t.ToolEnvDeny,
		ImagesSetting: toolImagesSetting, EnvDenySetting: toolEnvDenySetting}
	if len(t.ToolImages) == 0 {
		return nil, policy, func() {}, nil
	}
	if err := t.validate(); err != nil {
		return nil, policy, nil, err
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
	c, err := toolpod.New(toolpod.Options{
		Client:    client,
		Namespace: ns,
		Fence:     fence,
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
	log.Info("tool calls enabled", "images", t.ToolImages, "internet_egress", t.ToolInternet, "egress_deny", t.ToolEgressDeny, "env_deny", t.ToolEnvDeny)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if fence != nil {
		go fence.Run(ctx)
	}
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			log.Error("tool pod janitor stopped", "err", err)
		}
	}()
	var once sync.Once
	return c, policy, func() { once.Do(func() { cancel(); <-done }) }, nil
}
