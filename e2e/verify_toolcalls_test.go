//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/verify"
)

// toolCallChecks are verify's tool-call checks; on the e2e deployment (the
// agent image allowed, a stand-in in every private range) all of them PASS.
var toolCallChecks = []string{
	"toolcalls/internet-standin", "toolcalls/metadata-standin",
	"toolcalls/private-10", "toolcalls/private-172-16", "toolcalls/private-192-168", "toolcalls/private-100-64",
	"toolcalls/node-addresses", "toolcalls/icmp", "toolcalls/no-credentials", "toolcalls/non-root", "toolcalls/no-reuse", "toolcalls/used-pod-deleted",
	"toolcalls/timeout-kills-tree",
}

// toolBlockChecks are those a tool pod with open egress must fail.
var toolBlockChecks = []string{
	"toolcalls/metadata-standin",
	"toolcalls/private-10", "toolcalls/private-172-16", "toolcalls/private-192-168", "toolcalls/private-100-64",
	"toolcalls/node-addresses",
}

// toolInternetPolicy is the manifests' policy that gives tool pods the
// internet less the private ranges.
const toolInternetPolicy = "sandbox-tool-internet"

type toolPolicyKey struct{}

// serveRestore holds the undo of a serve change made in an assessment, for
// the feature's Teardown.
type (
	serveRestore    struct{ fn func() }
	serveRestoreKey struct{}
)

// TestVerifyToolPodsWithPrivateEgress drops the excepts of the tool pods'
// internet policy (tool pods may then reach every address, the API server
// included). A tool pod then cannot prove its egress cut, so a call fails
// closed with the 503 that says why. Runners that skip the proof (serve's
// --weaken=unproven-ready) do run the calls, and verify's tool-call block
// checks FAIL while the internet check still PASSes; serve is unfenced
// too (--weaken=unfenced), so that toolcalls/node-addresses fails on the
// node's public stand-in address as well. Then the very same policy and
// serve are put back.
func TestVerifyToolPodsWithPrivateEgress(t *testing.T) {
	f := features.New("sandbox verify fails when tool pods may reach private ranges").
		WithLabel("needs", "service").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			nps := clientset(ctx, t).NetworkingV1().NetworkPolicies(kindenv.Namespace)
			p, err := nps.Get(ctx, toolInternetPolicy, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			saved := p.DeepCopy()
			open := 0
			for i := range p.Spec.Egress {
				for j := range p.Spec.Egress[i].To {
					if b := p.Spec.Egress[i].To[j].IPBlock; b != nil && len(b.Except) > 0 {
						b.Except = nil
						open++
					}
				}
			}
			if open == 0 {
				t.Fatalf("policy %s has no excepts to drop: %+v", toolInternetPolicy, p.Spec)
			}
			if _, err := nps.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("update policy %s: %v", toolInternetPolicy, err)
			}
			t.Logf("dropped the excepts of %d ipBlocks of %s", open, toolInternetPolicy)
			time.Sleep(3 * time.Second) // the engine reprograms its rules within about a second
			ctx = context.WithValue(ctx, serveRestoreKey{}, &serveRestore{})
			return context.WithValue(ctx, toolPolicyKey{}, saved)
		}).
		Assess("a tool call fails closed", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r, err := postCall(ctx, forwardToService(ctx, t, cfg), toolCall("tools.sample:add", []any{1, 2}, nil, 10, nil))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("call on an open network: %s", r)
			if r.status != http.StatusServiceUnavailable || !strings.HasPrefix(r.errMsg, api.NotSealed) {
				t.Errorf("a tool call whose pod cannot prove its egress cut: %s, want 503 %q", r, api.NotSealed)
			}
			return ctx
		}).
		Assess("with runners that skip the proof, the tool-call block checks fail", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			const flag, unfenced = "--weaken=unproven-ready", "--weaken=unfenced"
			if !binaryAccepts(ctx, "serve", flag) || !binaryAccepts(ctx, "run", flag) || !binaryAccepts(ctx, "serve", unfenced) {
				t.Fatalf("the binary does not accept %s and %s", flag, unfenced)
			}
			ctx.Value(serveRestoreKey{}).(*serveRestore).fn = weaken(ctx, t, serveChange{args: []string{flag, unfenced}})
			rep := runVerify(ctx, t, "--only", "toolcalls")
			expect(t, rep, verify.Fail, toolBlockChecks...)
			expect(t, rep, verify.Pass, "toolcalls/internet-standin")
			if rep.Summary.OK {
				t.Error("verify said OK with tool pods open to private ranges")
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			saved, ok := ctx.Value(toolPolicyKey{}).(*networkingv1.NetworkPolicy)
			if !ok {
				return ctx
			}
			nps := clientset(ctx, t).NetworkingV1().NetworkPolicies(kindenv.Namespace)
			cur, err := nps.Get(ctx, toolInternetPolicy, metav1.GetOptions{})
			if err != nil {
				t.Errorf("get policy %s to restore it: %v", toolInternetPolicy, err)
				return ctx
			}
			cur.Spec = saved.Spec
			if _, err := nps.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Errorf("restore policy %s: %v", toolInternetPolicy, err)
			}
			if sr, ok := ctx.Value(serveRestoreKey{}).(*serveRestore); ok && sr.fn != nil {
				sr.fn()
			}
			time.Sleep(3 * time.Second)
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}
