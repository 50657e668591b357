package modes

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/policy"
)

// AuthFlags are serve's flags for who may call it; ServeCmd embeds them.
type AuthFlags struct {
	Auth         string `enum:"auto,kubernetes,none" default:"auto" env:"SANDBOX_AUTH" help:"Who may call /v1/*: kubernetes (a ServiceAccount token with --auth-audience, checked with a TokenReview, then the caller policy in ConfigMap ${policy_configmap}), none (anyone who reaches serve), or auto: kubernetes with the kubernetes backend, none with local."`
	AuthAudience string `name:"auth-audience" default:"${auth_audience}" env:"SANDBOX_AUTH_AUDIENCE" help:"The audience a caller's token must name."`
	// UnsafeNoAuthOnNetwork is what lets the local backend listen beyond
	// loopback with no authentication: anyone who reaches the port runs
	// code as this machine's user.
	UnsafeNoAuthOnNetwork bool `name:"unsafe-no-auth-on-network" help:"Let --auth none listen on an address other hosts reach: anyone who reaches it runs code here. Unsafe."`
}

// authMode is --auth with auto resolved for backend.
func (f *AuthFlags) authMode(backend string) string {
	if f.Auth != "auto" {
		return f.Auth
	}
	if backend == "kubernetes" {
		return "kubernetes"
	}
	return "none"
}

// newAuth builds the authenticator and the caller policy's gate (nil for
// --auth none) for backend, and starts following the policy's ConfigMap
// until ctx ends. deployed is the deployment's own tool image allow list,
// which the policy may only narrow.
func newAuth(ctx context.Context, f *AuthFlags, k *KubeFlags, backend, listen string, deployed api.CallPolicy, log *slog.Logger) (auth.Authenticator, *policy.Gate, error) {
	if f.authMode(backend) == "none" {
		if !loopback(listen) && !f.UnsafeNoAuthOnNetwork && backend != "kubernetes" {
			return nil, nil, fmt.Errorf("--listen %s with --auth none: anyone who reaches it would run code here; listen on 127.0.0.1, or say --unsafe-no-auth-on-network", listen)
		}
		log.Warn("authentication is off (--auth none): any caller that reaches serve runs code")
		return auth.None{}, nil, nil
	}
	client, err := kube.NewClient(k.Kubeconfig, "sandbox-serve")
	if err != nil {
		return nil, nil, fmt.Errorf("--auth kubernetes: %w", err)
	}
	ns, _ := k.placement()
	g := policy.NewGate()
	go policy.Watch(ctx, client, ns, deployed, g, log)
	return auth.NewTokenReview(client, f.AuthAudience), g, nil
}

// loopback reports whether listen binds only addresses of this machine's
// loopback: an explicit loopback host, or "localhost".
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
