// Command sandbox-kind brings the offline kind cluster up with the sandbox
// service deployed (`make kind-up`), or deletes it (`make kind-down`).
//
//	cd e2e && go run ./cmd/sandbox-kind up     # build what is missing, create or reuse the cluster, deploy
//	cd e2e && go run ./cmd/sandbox-kind down   # delete the cluster and the stand-ins
//
// SANDBOX_E2E_WORKERS=N (make kind-up SANDBOX_E2E_WORKERS=2) makes a control
// plane and N workers instead of one node.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/auth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-kind:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || (args[0] != "up" && args[0] != "down") {
		return errors.New("usage: sandbox-kind up|down")
	}
	root, err := kindenv.RepoRoot()
	if err != nil {
		return err
	}
	env := kindenv.NewEnv(root, stderr)
	if args[0] == "down" {
		return env.Down(ctx)
	}
	if env.Workers, err = kindenv.WorkersFromEnv(); err != nil {
		return err
	}
	return up(ctx, env, stdout)
}

func up(ctx context.Context, env *kindenv.Env, stdout io.Writer) error {
	start := time.Now()
	before := env.ImageID(ctx)
	for _, phase := range []func(context.Context) error{
		env.Host,
		env.Images,
		func(ctx context.Context) error { return env.CreateCluster(ctx, false) },
		env.LoadImages,
		env.StandinsUp,
		env.PrivateStandinsUp,
		env.DNSCanaryUp,
		env.EgressUp,
	} {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	deployErr := env.Deploy(ctx)
	if deployErr == nil {
		deployErr = env.WaitAvailable(ctx, 3*time.Minute)
	}
	if deployErr == nil {
		deployErr = env.RolloutStatus(ctx, 3*time.Minute)
	}
	if deployErr == nil && env.Reused && env.ImageID(ctx) != before {
		// Same tag, new content: running pods would keep the old image.
		deployErr = env.Restart(ctx, 3*time.Minute)
	}
	fmt.Fprintf(env.Log, "=== kind-up took %s\n", time.Since(start).Round(time.Second))
	printAccess(stdout, env)
	if deployErr != nil {
		return fmt.Errorf("the cluster is up, but the service is not: %w", deployErr)
	}
	return nil
}

func printAccess(w io.Writer, env *kindenv.Env) {
	k := env.Kubectl.Path
	fmt.Fprintf(w, `
Cluster %q is up (node image %s; nodes %s).
  kubeconfig:   %s   (also merged into your default kubeconfig as context kind-%s)
  kubectl:      %s
  stand-ins:    metadata %s (network %s), internet %s (network %s); body contains %q
  DNS canary:   zone %s at %s, forwarded to by CoreDNS; its log: docker logs sandbox-e2e-dns-canary

Reach the service, as the default ServiceAccount of %s (granted by the rig's caller policy):
  %s --kubeconfig %s -n %s port-forward svc/%s 8080:80 &
  TOKEN=$(%s --kubeconfig %s -n %s create token default --audience %s)
  curl -s localhost:8080/v1/execute -H "Authorization: Bearer $TOKEN" -d '{"code": "print(6*7)"}'

Delete it with: make kind-down

For tools and tests (sandbox verify, the e2e suite with SANDBOX_E2E_REUSE=1):
%s`, env.Name, env.NodeImage, strings.Join(env.Nodes, " "), env.Kubeconfig, env.Name, k,
		env.Standins.Metadata.URL(), env.Standins.Metadata.Network,
		env.Standins.Internet.URL(), env.Standins.Internet.Network, kindenv.CanaryToken,
		kindenv.DNSCanaryZone, kindenv.DNSCanaryIP,
		kindenv.ClientNamespace, k, env.Kubeconfig, kindenv.Namespace, kindenv.Deployment,
		k, env.Kubeconfig, kindenv.ClientNamespace, auth.DefaultAudience, exports(env))
}

func exports(env *kindenv.Env) string {
	vars := env.Vars()
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  export %s=%s\n", k, vars[k])
	}
	return b.String()
}
