package verify

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// TestFixturesOnCluster deploys verify's canary and control on the cluster
// that SANDBOX_VERIFY_KUBECONFIG points at (nothing of the sandbox service is
// needed) and checks that the control reaches every in-cluster target: the
// positive control the network verdicts stand on. Skipped without a cluster.
func TestFixturesOnCluster(t *testing.T) {
	kc := os.Getenv("SANDBOX_VERIFY_KUBECONFIG")
	if kc == "" {
		t.Skip("SANDBOX_VERIFY_KUBECONFIG not set")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg, cs, err := Clients(kc, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{opts: Options{Namespace: "sandbox-verify-test", MetadataAddr: os.Getenv("SANDBOX_E2E_METADATA_ADDR"),
		InternetAddr: os.Getenv("SANDBOX_E2E_INTERNET_ADDR"), StandinToken: os.Getenv("SANDBOX_VERIFY_STANDIN_TOKEN")}, cfg: cfg, cs: cs, start: time.Now(), target: map[string]string{}}
	setDefaults(&e.opts)
	ns := "sandbox-verify-" + randomHex(3)
	defer func() {
		if err := cleanupFixtures(cs, ns); err != nil {
			t.Error(err)
		}
	}()
	image := os.Getenv("SANDBOX_VERIFY_IMAGE")
	if image == "" {
		image = "sandbox:dev"
	}
	fx, err := deployFixtures(ctx, cs, ns, image)
	if err != nil {
		t.Fatal(err)
	}
	targets, notes := e.networkTargets(ctx, fx, e.snippetDNS(ctx))
	t.Logf("notes: %v", notes)
	var ctl []netsec.Target
	for _, tg := range targets {
		c := tg.Target
		c.DeadlineS, c.IntervalS = 10, 0.5
		ctl = append(ctl, c)
	}
	res, err := podExec(ctx, cfg, cs, fx.Namespace, fx.ControlPod, fx.ControlName, []string{"python3", "-"}, netsec.Script(ctl))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := netsec.Parse(res.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		o := rep.Outcomes[tg.Name]
		t.Logf("%-40s %-22s %s", tg.Name, tg.Addr(), o.Describe())
		if tg.check != "network/other-sandbox-runner" && !netsec.ControlOK(tg.Target, o) {
			t.Errorf("control did not reach %s (%s)", tg.Name, tg.Addr())
		}
	}
}
