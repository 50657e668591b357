//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/verify"
)

// verifyTimeout bounds one `sandbox verify` run; a full run takes about two
// minutes on kind.
const verifyTimeout = 8 * time.Minute

// runVerify runs the built binary against the suite's cluster, with the
// stand-ins, and returns its JSON report (and the table rendered from it in
// the test log). A report that does not parse fails the test; a non-zero
// exit does not by itself: callers judge the checks.
func runVerify(ctx context.Context, t *testing.T, args ...string) *verify.Report {
	t.Helper()
	s := Suite(ctx)
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	argv := append([]string{"verify", "--kubeconfig", s.Kubeconfig,
		"--metadata-addr", s.Standins.Metadata.IP + ":80", "--internet-addr", s.Standins.Internet.IP + ":80",
		"--standin-token", kindenv.CanaryToken, "--private-addr", strings.Join(kindenv.PrivateAddrs(), ","),
		"--dns-canary-zone", kindenv.DNSCanaryZone, "--dns-canary-answer", kindenv.DNSCanaryIP,
		"--output", "json"}, args...)
	cmd := exec.CommandContext(ctx, s.SandboxBin, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("sandbox %s: %v after %s\n%s", strings.Join(argv, " "), err, time.Since(start).Round(time.Second), stderr.String())
	var rep verify.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("verify printed no JSON report (%v): %q", jerr, clipOut(stdout.String()))
	}
	var table bytes.Buffer
	_ = rep.Write(&table, verify.FormatTable)
	t.Logf("verify report:\n%s", table.String())
	if (err == nil) != rep.Summary.OK {
		t.Errorf("exit %v disagrees with summary ok=%v", err, rep.Summary.OK)
	}
	return &rep
}

func clipOut(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// expect asserts the status of each named check.
func expect(t *testing.T, rep *verify.Report, want verify.Status, names ...string) {
	t.Helper()
	for _, n := range names {
		r, ok := rep.Check(n)
		switch {
		case !ok:
			t.Errorf("%s: not in the report", n)
		case r.Status != want:
			t.Errorf("%s: %s, want %s: %s", n, r.Status, want, r.Evidence)
		}
	}
}

func clientset(ctx context.Context, t *testing.T) kubernetes.Interface {
	t.Helper()
	_, cs, err := verify.Clients(Suite(ctx).Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestVerify runs verify against the real deployment: every check PASS,
// the tool-call checks included (the deployment allows the agent image).
func TestVerify(t *testing.T) {
	f := features.New("sandbox verify passes on the real deployment").
		WithLabel("needs", "service").
		Assess("every check passes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			rep := runVerify(ctx, t)
			for _, c := range rep.Checks {
				if c.Status != verify.Pass && (c.Name != "network/ipv6" || c.Status != verify.Skip) {
					t.Errorf("%s: %s: %s", c.Name, c.Status, c.Evidence)
				}
			}
			expect(t, rep, verify.Pass, toolCallChecks...)
			expect(t, rep, verify.Pass, authChecks...)
			expect(t, rep, verify.Pass, "network/serve-pod", "network/node-ports", "network/dns-exfiltration", "network/ready-on-proof", "network/icmp")
			// The kind cluster is IPv4 only: not applicable, said so.
			expect(t, rep, verify.Skip, "network/ipv6")
			if len(rep.Checks) < 30 {
				t.Errorf("only %d checks ran", len(rep.Checks))
			}
			if !rep.Summary.OK {
				t.Errorf("summary not ok: %+v", rep.Summary)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// networkBlockChecks are the checks that a deployment without
// NetworkPolicies must fail.
var networkBlockChecks = []string{
	"network/canary-pod", "network/canary-service", "network/apiserver-service", "network/apiserver-endpoint",
	"network/kubelet", "network/other-sandbox-runner", "network/internet-standin", "network/metadata-standin",
	"network/dns-other-resolver-pod-udp", "network/dns-other-resolver-pod-tcp",
	"network/dns-other-resolver-service-udp", "network/dns-other-resolver-service-tcp",
	"network/serve-pod", "network/node-ports",
	// Sealed DNS: the sandbox reaches the cluster DNS, which forwards names out.
	"network/dns-cluster-udp", "network/dns-cluster-tcp", "network/dns-exfiltration",
}

type policiesKey struct{}

// TestVerifyWithoutNetworkPolicy deletes the namespace's NetworkPolicies
// from a deployment whose runners report Ready without proving their
// egress cut (serve's --weaken=unproven-ready: without it no pod would be
// Ready on the open network, TestUnsealedNetworkNeverReady), and asserts
// that every network block check FAILs; then it puts the very same
// policies back and serve as it was.
func TestVerifyWithoutNetworkPolicy(t *testing.T) {
	const flag = "--weaken=unproven-ready"
	f := features.New("sandbox verify fails without NetworkPolicies").
		WithLabel("needs", "service").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			for _, k := range []knob{{"serve", flag}, {"run", flag}} {
				if !binaryAccepts(ctx, k.mode, k.flag) {
					t.Fatalf("sandbox %s does not accept %s", k.mode, k.flag)
				}
			}
			ctx = context.WithValue(ctx, restoreKey{}, weaken(ctx, t, serveChange{args: []string{flag}}))
			ctx = context.WithValue(ctx, policiesKey{}, removePolicies(ctx, t, clientset(ctx, t)))
			time.Sleep(3 * time.Second) // the engine removes its rules within about a second
			return ctx
		}).
		Assess("the network block checks fail", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			rep := runVerify(ctx, t, "--only", "network")
			expect(t, rep, verify.Fail, networkBlockChecks...)
			if rep.Summary.OK {
				t.Error("verify said OK without NetworkPolicies")
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if restore, ok := ctx.Value(policiesKey{}).(func()); ok {
				restore()
			}
			time.Sleep(3 * time.Second)
			if restore, ok := ctx.Value(restoreKey{}).(func()); ok {
				restore()
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// binaryAccepts says whether the built binary knows a (hidden) flag of one
// of its modes: kong refuses unknown flags before it prints help.
func binaryAccepts(ctx context.Context, mode, flag string) bool {
	return exec.CommandContext(ctx, Suite(ctx).SandboxBin, mode, flag, "--help").Run() == nil
}

// knob is a hidden flag a weakened deployment needs, and the mode that must
// accept it.
type knob struct{ mode, flag string }

// serveChange is a temporary change to the serve Deployment.
type serveChange struct {
	args []string // appended to serve's args
	psa  string   // the namespace's Pod Security enforce level meanwhile; "" keeps it
	// coldPool says the changed pool never gets a Ready pod (on purpose):
	// the rollout is done when the new serve pod's pool has a Running pod,
	// and the serve pod itself is never Ready.
	coldPool bool
}

// weaken applies ch to the serve Deployment (and namespace), waits for the
// rollout and the new serve pod's pool, and returns the function that undoes
// it. When the change does not roll out it undoes it before failing: a
// Setup that fails never reaches its feature's Teardown.
func weaken(ctx context.Context, t *testing.T, ch serveChange) func() {
	t.Helper()
	cs := clientset(ctx, t)
	deps := cs.AppsV1().Deployments(kindenv.Namespace)
	dep, err := deps.Get(ctx, kindenv.Deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	origArgs := append([]string(nil), dep.Spec.Template.Spec.Containers[0].Args...)
	origStrategy := *dep.Spec.Strategy.DeepCopy()
	nsClient := cs.CoreV1().Namespaces()
	ns, err := nsClient.Get(ctx, kindenv.Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	origPSA := ns.Labels["pod-security.kubernetes.io/enforce"]
	if ch.psa != "" {
		ns.Labels["pod-security.kubernetes.io/enforce"] = ch.psa
		if _, err := nsClient.Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Recreate, not a rolling update: on a 2-CPU node a surge replica's
	// pool may find no room while the old replica's warm pods hold the CPU,
	// and the rollout never completes.
	setArgs := func(args []string, strategy appsv1.DeploymentStrategy, cold bool) error {
		d, err := deps.Get(ctx, kindenv.Deployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Args = args
		d.Spec.Strategy = strategy
		if _, err := deps.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return waitRollout(ctx, cs, cold)
	}
	recreate := appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	restore := func() {
		if err := setArgs(origArgs, recreate, false); err != nil {
			t.Errorf("restore serve args: %v", err)
		}
		if err := setStrategy(ctx, cs, origStrategy); err != nil {
			t.Errorf("restore the Deployment strategy: %v", err)
		}
		if ch.psa != "" {
			if ns, err := nsClient.Get(ctx, kindenv.Namespace, metav1.GetOptions{}); err == nil {
				ns.Labels["pod-security.kubernetes.io/enforce"] = origPSA
				if _, err := nsClient.Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
					t.Errorf("restore Pod Security label: %v", err)
				}
			}
		}
	}
	if err := setArgs(append(append([]string(nil), origArgs...), ch.args...), recreate, ch.coldPool); err != nil {
		restore()
		t.Fatalf("redeploy serve with %v: %v", ch.args, err)
	}
	return restore
}

// waitRollout waits, as `kubectl rollout status` does, until every replica
// runs the current template (and, unless cold, is available), and then
// until the new serve pod's own pool has a Ready sandbox pod -- or, when
// cold, a Running one (an old replica's warm pods do not count: they were
// made from the old template).
func waitRollout(ctx context.Context, cs kubernetes.Interface, cold bool) error {
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(kindenv.Namespace).Get(ctx, kindenv.Deployment, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.Replicas != want || (!cold && st.AvailableReplicas != want) {
			return false, nil
		}
		serves, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		owners := map[string]bool{}
		for _, p := range serves.Items {
			if p.DeletionTimestamp == nil {
				owners[p.Name] = true
			}
		}
		snippets, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=sandbox-runner,sandbox.dev/kind=snippet"})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		for _, p := range snippets.Items {
			if owners[p.Labels["sandbox.dev/owner"]] && p.Status.Phase == corev1.PodRunning && (cold || podReady(p)) {
				return true, nil
			}
		}
		return false, nil
	})
}

// setStrategy puts a Deployment strategy back (no new rollout: the
// strategy is not part of the pod template).
func setStrategy(ctx context.Context, cs kubernetes.Interface, st appsv1.DeploymentStrategy) error {
	deps := cs.AppsV1().Deployments(kindenv.Namespace)
	d, err := deps.Get(ctx, kindenv.Deployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.Spec.Strategy = st
	_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	return err
}

type restoreKey struct{}

// weakenedFeature runs verify against serve started with extra (hidden,
// test-only) flags and asserts that the named checks FAIL.
func weakenedFeature(name string, knobs []knob, extraArgs []string, psa string, only string, fails []string) features.Feature {
	return weakenedRuns(name, knobs, extraArgs, psa, verifyRun{only, fails})
}

// verifyRun is one run of verify on a weakened deployment: its --only
// groups, and the checks that must FAIL in them.
type verifyRun struct {
	only  string
	fails []string
}

// weakenedRuns is weakenedFeature with verify run once per run, in order,
// on the one weakened deployment.
func weakenedRuns(name string, knobs []knob, extraArgs []string, psa string, runs ...verifyRun) features.Feature {
	return features.New(name).
		WithLabel("needs", "service").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			for _, k := range knobs {
				if !binaryAccepts(ctx, k.mode, k.flag) {
					t.Fatalf("sandbox %s does not accept %s: this weakened deployment cannot be built, so the checks it shows able to fail are unproven", k.mode, k.flag)
				}
			}
			return context.WithValue(ctx, restoreKey{}, weaken(ctx, t, serveChange{args: extraArgs, psa: psa}))
		}).
		Assess("the matching checks fail", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			for _, r := range runs {
				rep := runVerify(ctx, t, "--only", r.only)
				expect(t, rep, verify.Fail, r.fails...)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if restore, ok := ctx.Value(restoreKey{}).(func()); ok {
				restore()
			}
			return ctx
		}).
		Feature()
}

// TestVerifyRootPodWithToken: snippet pods and tool pods as uid 0 with the
// service-account token mounted (serve's --weaken=root-token and
// --weaken=tool-root-token, the namespace relaxed to privileged so they are
// admitted), on one deployment to spare the CI a rollout: the two touch
// different pods, and each group's checks FAIL.
func TestVerifyRootPodWithToken(t *testing.T) {
	flags := []string{"--weaken=root-token", "--weaken=tool-root-token"}
	testenv.Test(t, weakenedFeature("sandbox verify fails on root pods and root tool pods with a token",
		[]knob{{"serve", flags[0]}, {"serve", flags[1]}}, flags, "privileged", "posture,inside,toolcalls",
		[]string{"posture/pod-security-restricted", "posture/pod-spec-container", "posture/pod-spec-isolation",
			"inside/non-root-identity", "inside/no-service-account-token",
			"toolcalls/non-root", "toolcalls/no-credentials"}))
}

// TestVerifyRunnerWithoutTreeKill: a runner that kills only the leader
// process on timeout, in snippet pods and tool pods. A tool's children
// outlive its timeout; a snippet's fork bomb's children hold its output
// open and its answer comes late. The tool calls are judged first, in a
// run of their own: the bomb left running swamps the 2-CPU node, and the
// clean-clone run of 2026-12-06 lost the port-forward to serve (EOF) when
// they came after it.
func TestVerifyRunnerWithoutTreeKill(t *testing.T) {
	const flag = "--weaken=kill-leader-only"
	knobs := []knob{{"serve", flag}, {"run", flag}}
	testenv.Test(t, weakenedRuns("sandbox verify fails on a runner without the tree kill", knobs, []string{flag}, "",
		verifyRun{"toolcalls", []string{"toolcalls/timeout-kills-tree"}},
		verifyRun{"runner", []string{"runner/timeout-kills-tree", "runner/fork-bomb-answered"}}))
}

// authChecks are the checks a serve without authentication must fail.
var authChecks = []string{"auth/anonymous-refused", "auth/wrong-audience-refused", "auth/ungranted-caller-refused",
	"auth/image-not-granted", "auth/quota-enforced"}

// TestVerifyICMPUnfencedNoAuth: sandbox pods that keep the runtime's ICMP
// range (kube-router passes echo for every pod), a serve whose fence wants
// nothing, and serve --auth none (anyone who reaches it runs code and calls
// tools), on one deployment to spare the CI two rollouts: the echo checks,
// toolcalls/node-addresses (the node's stand-in "public" address, which
// serve's --tool-egress-deny names, answers a tool pod again) and every
// auth check must FAIL. The three touch different checks.
func TestVerifyICMPUnfencedNoAuth(t *testing.T) {
	flags := []string{"--weaken=allow-icmp", "--weaken=unfenced", "--auth=none"}
	knobs := []knob{{"serve", flags[0]}, {"serve", flags[1]}, {"serve", flags[2]}}
	testenv.Test(t, weakenedFeature("sandbox verify fails on pods that may ping, tool pods that reach the nodes, and a serve that names no caller",
		knobs, flags, "", "network,toolcalls,auth",
		append([]string{"network/icmp", "toolcalls/icmp", "toolcalls/node-addresses"}, authChecks...)))
}

// TestVerifyUnprovenReady: runners that report Ready without proving their
// egress cut (policies intact): verify's copy of a live pod, where no policy
// applies, becomes Ready, and network/ready-on-proof must FAIL.
func TestVerifyUnprovenReady(t *testing.T) {
	const flag = "--weaken=unproven-ready"
	knobs := []knob{{"serve", flag}, {"run", flag}}
	testenv.Test(t, weakenedFeature("sandbox verify fails on runners Ready without proof", knobs, []string{flag}, "",
		"network", []string{"network/ready-on-proof"}))
}
