//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// Environment variables that change how the suite treats the cluster.
const (
	// keepEnv=1 leaves the cluster (and stand-ins) running after the suite.
	keepEnv = "SANDBOX_E2E_KEEP"
	// reuseEnv=1 uses an existing cluster (e.g. from `make kind-up`) instead
	// of creating a fresh one, and never deletes it.
	reuseEnv = "SANDBOX_E2E_REUSE"
)

var testenv env.Environment

// imageBefore is the sandbox image's ID before the suite rebuilt it: a reused
// cluster must restart the Deployment when it changed.
var imageBefore string

// suite is the environment TestMain built. Tests (and the verify tests in
// this package) read it through Suite(ctx) or directly.
var suite *kindenv.Env

type ctxKey int

const (
	envKey ctxKey = iota
	serviceErrKey
)

// Suite returns the environment from a test's context.
func Suite(ctx context.Context) *kindenv.Env {
	if e, ok := ctx.Value(envKey).(*kindenv.Env); ok {
		return e
	}
	return suite
}

// Standins returns the metadata and internet stand-ins (addresses outside
// the cluster that the node can reach; each answers HTTP on port 80 with a
// body containing kindenv.CanaryToken).
func Standins(ctx context.Context) kindenv.Standins { return Suite(ctx).Standins }

// ServiceErr is why the sandbox service is not deployed, or nil when it is
// Available. Tests that need the service fail with it.
func ServiceErr(ctx context.Context) error {
	err, _ := ctx.Value(serviceErrKey).(error)
	return err
}

func TestMain(m *testing.M) {
	root, err := kindenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	suite = kindenv.NewEnv(root, os.Stderr)
	if suite.Workers, err = kindenv.WorkersFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	reuse := os.Getenv(reuseEnv) == "1"
	imageBefore = suite.ImageID(context.Background())
	cfg := envconf.New()
	testenv = env.NewWithConfig(cfg)
	start := time.Now()

	testenv.Setup(
		func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
			return ctx, suite.Host(ctx)
		},
		func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
			return ctx, suite.Images(ctx)
		},
		func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
			if err := suite.CreateCluster(ctx, !reuse); err != nil {
				return ctx, err
			}
			cfg.WithKubeconfigFile(suite.Kubeconfig)
			return context.WithValue(ctx, envKey, suite), nil
		},
		func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
			return ctx, suite.LoadImages(ctx)
		},
		func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
			if err := suite.StandinsUp(ctx); err != nil {
				return ctx, err
			}
			if err := suite.PrivateStandinsUp(ctx); err != nil {
				return ctx, err
			}
			if err := suite.DNSCanaryUp(ctx); err != nil {
				return ctx, err
			}
			if err := suite.EgressUp(ctx); err != nil {
				return ctx, err
			}
			// Also as environment, for tests and tools that read it there.
			for k, v := range suite.Vars() {
				os.Setenv(k, v)
			}
			return ctx, nil
		},
		deployService,
		func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
			fmt.Fprintf(os.Stderr, "=== setup took %s; stand-ins: metadata %s, internet %s\n",
				time.Since(start).Round(time.Second), suite.Standins.Metadata.URL(), suite.Standins.Internet.URL())
			return ctx, nil
		},
	)
	testenv.Finish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		switch {
		case reuse:
			fmt.Fprintf(os.Stderr, "leaving the reused cluster %q running\n", suite.Name)
		case os.Getenv(keepEnv) == "1":
			fmt.Fprintf(os.Stderr, "%s=1: leaving cluster %q running (kubeconfig %s); delete it with make kind-down\n",
				keepEnv, suite.Name, suite.Kubeconfig)
		default:
			// The suite's context may be spent; deletion gets its own.
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			return ctx, suite.Down(dctx)
		}
		return ctx, nil
	})
	code := testenv.Run(m)
	fmt.Fprintf(os.Stderr, "=== e2e suite took %s\n", time.Since(start).Round(time.Second))
	os.Exit(code)
}

// deployService applies `sandbox manifests` and waits for the Deployment to
// be Available. A failure here does not stop the suite: tests that do not
// need the service (NetworkPolicy enforcement) still run, and those that do
// fail with the recorded error.
func deployService(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
	err := suite.Deploy(ctx)
	if err == nil {
		err = suite.Phase("wait for deployment", func() error {
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: kindenv.Deployment, Namespace: kindenv.Namespace}}
			return wait.For(
				conditions.New(cfg.Client().Resources()).DeploymentConditionMatch(dep, appsv1.DeploymentAvailable, "True"),
				wait.WithContext(ctx), wait.WithTimeout(3*time.Minute), wait.WithInterval(2*time.Second))
		})
	}
	if err == nil {
		// On a reused cluster the apply may have changed serve's settings.
		err = suite.Phase("rollout status", func() error { return suite.RolloutStatus(ctx, 3*time.Minute) })
	}
	if err == nil && suite.Reused && suite.ImageID(ctx) != imageBefore {
		err = suite.Restart(ctx, 3*time.Minute)
	}
	if err == nil {
		err = suite.CallerToken(ctx, filepath.Join(suite.Root, "bin"))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "!!! the sandbox service is not deployed; tests that need it will fail: %v\n", err)
		return context.WithValue(ctx, serviceErrKey, fmt.Errorf("sandbox service not deployed: %w", err)), nil
	}
	return ctx, nil
}
