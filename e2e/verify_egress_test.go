//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/verify"
)

// egressChecks are verify's egress-by-name checks; on the e2e deployment
// (the agent image's egress tag allowed allowed.test, rebind.test and
// meta.test, the TLS stand-in behind allowed.test and other.test) all PASS.
var egressChecks = []string{
	"toolcalls/egress-by-name", "toolcalls/name-not-allowed", "toolcalls/no-direct-egress",
	"toolcalls/rebinding-refused", "toolcalls/sni-mismatch-refused", "toolcalls/no-own-dns",
}

// egressGateway is the manifests' gateway Deployment.
const egressGateway = "sandbox-egress"

// TestVerifyEgressByName: the deployment as shipped passes every egress
// check.
func TestVerifyEgressByName(t *testing.T) {
	testenv.Test(t, features.New("sandbox verify passes egress by name").
		WithLabel("needs", "service").
		Assess("every egress check passes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			if err := waitGateway(ctx, t); err != nil {
				t.Fatal(err)
			}
			rep := runVerify(ctx, t, "--only", "toolcalls")
			expect(t, rep, verify.Pass, egressChecks...)
			return ctx
		}).Feature())
}

// TestVerifyEgressServeWeakened: serve gives a tool pod with names the
// internet policy's label (egress-direct) and the cluster DNS
// (egress-cluster-dns), on one deployment to spare the CI a rollout: each
// matching check must FAIL (each weakening alone fails only its own check,
// as first run on kind 2026-12-06, and egress-direct egress-by-name too:
// the pod loses its way to the gateway).
func TestVerifyEgressServeWeakened(t *testing.T) {
	flags := []string{"--weaken=egress-direct", "--weaken=egress-cluster-dns"}
	testenv.Test(t, weakenedFeature("sandbox verify fails on a tool pod with names that reaches the internet directly and resolves names itself",
		[]knob{{"serve", flags[0]}, {"serve", flags[1]}}, flags, "", "toolcalls",
		[]string{"toolcalls/no-direct-egress", "toolcalls/no-own-dns"}))
}

// TestVerifyEgressGatewayWeakened: a gateway that lets every name through,
// dials private answers, skips the hello's check, or refuses everything:
// each check that sees it must FAIL.
func TestVerifyEgressGatewayWeakened(t *testing.T) {
	for _, tt := range []struct {
		flags []string
		fails []string
	}{
		{[]string{"--weaken=egress-allow-all", "--weaken=egress-rebind", "--weaken=egress-no-sni"},
			[]string{"toolcalls/name-not-allowed", "toolcalls/rebinding-refused", "toolcalls/sni-mismatch-refused"}},
		{[]string{"--weaken=egress-refuse-all"}, []string{"toolcalls/egress-by-name"}},
	} {
		testenv.Test(t, features.New("sandbox verify fails on a weakened egress gateway "+tt.flags[0]).
			WithLabel("needs", "service").
			Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
				if err := ServiceErr(ctx); err != nil {
					t.Fatal(err)
				}
				for _, f := range tt.flags {
					if !binaryAccepts(ctx, "egress", f) {
						t.Fatalf("sandbox egress does not accept %s", f)
					}
				}
				return context.WithValue(ctx, restoreKey{}, weakenGateway(ctx, t, tt.flags))
			}).
			Assess("the matching checks fail", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
				rep := runVerify(ctx, t, "--only", "toolcalls")
				expect(t, rep, verify.Fail, tt.fails...)
				return ctx
			}).
			Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
				if restore, ok := ctx.Value(restoreKey{}).(func()); ok {
					restore()
				}
				return ctx
			}).Feature())
	}
}

// weakenGateway appends args to the gateway's, waits for the rollout, and
// returns the undo.
func weakenGateway(ctx context.Context, t *testing.T, args []string) func() {
	t.Helper()
	cs := clientset(ctx, t)
	deps := cs.AppsV1().Deployments(kindenv.Namespace)
	set := func(f func(d *appsv1.Deployment)) error {
		d, err := deps.Get(ctx, egressGateway, metav1.GetOptions{})
		if err != nil {
			return err
		}
		f(d)
		if _, err := deps.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return waitGateway(ctx, t)
	}
	var orig []string
	if err := set(func(d *appsv1.Deployment) {
		orig = append([]string(nil), d.Spec.Template.Spec.Containers[0].Args...)
		d.Spec.Template.Spec.Containers[0].Args = append(append([]string(nil), orig...), args...)
	}); err != nil {
		t.Fatalf("weaken the gateway: %v", err)
	}
	return func() {
		if err := set(func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Args = orig }); err != nil {
			t.Errorf("restore the gateway: %v", err)
		}
	}
}

// waitGateway waits until every replica of the gateway runs its current
// template and is available.
func waitGateway(ctx context.Context, t *testing.T) error {
	cs := clientset(ctx, t)
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(kindenv.Namespace).Get(ctx, egressGateway, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		st := d.Status
		return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want, nil
	})
}
