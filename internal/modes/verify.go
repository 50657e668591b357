package modes

import (
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandbox/internal/verify"
)

// VerifyCmd proves a live deployment's security properties and reports each
// as PASS, FAIL or INCONCLUSIVE with its evidence.
type VerifyCmd struct {
	Namespace  string `default:"${verify_name}" env:"SANDBOX_NAMESPACE" help:"Namespace of the deployed service and its snippet pods."`
	URL        string `name:"url" env:"SANDBOX_URL" help:"Base URL of the service; empty opens a port-forward to Service --service."`
	Kubeconfig string `type:"path" help:"Kubeconfig file (default: KUBECONFIG or ~/.kube/config). Needs admin rights: verify creates a namespace, execs into its control pod and reviews RBAC."`
	Context    string `name:"context" help:"Kubeconfig context to use."`
	Service    string `default:"${verify_name}" help:"Name of the service's Service and Deployment."`

	ServiceAccount string   `default:"${verify_name}" help:"The service's ServiceAccount, whose rights are reviewed."`
	Caller         string   `default:"${verify_caller}" help:"The ServiceAccount (in --namespace) verify calls the service as, with a token it mints; the caller policy must grant it everything."`
	Audience       string   `name:"auth-audience" default:"${auth_audience}" help:"The audience of the tokens verify mints (serve's --auth-audience)."`
	Image          string   `help:"Image of verify's canary and control pods (needs python3); default: the service's own image."`
	MetadataAddr   string   `default:"169.254.169.254:80" help:"Metadata service (or its stand-in) as host:port answering HTTP; empty skips it. Never a real outside address in tests."`
	InternetAddr   string   `default:"198.51.100.10:80" help:"An 'internet' stand-in as host:port answering HTTP; empty skips it."`
	ToolImage      string   `name:"tool-image" help:"Allowed image the tool-call checks call builtins:exec in (needs python3); default: the first exact entry of the Deployment's SANDBOX_TOOL_IMAGES."`
	EgressImage    string   `name:"egress-image" help:"Image with names the egress checks call (needs python3); default: the first exact entry of SANDBOX_TOOL_IMAGES that has names."`
	EgressAllowed  string   `name:"egress-allowed" default:"${egress_allowed}" placeholder:"HOST:PORT" help:"A host:port on that image's list answering TLS (the egress checks' allowed target)."`
	EgressOther    string   `name:"egress-other" default:"${egress_other}" placeholder:"HOST:PORT" help:"An internet host:port answering TLS that the image's list does not hold."`
	EgressRebind   []string `name:"egress-rebind" sep:"," default:"${egress_rebind}" placeholder:"HOST:PORT" help:"Names on the image's list that resolve into private ranges (the gateway must refuse them)."`
	PrivateAddrs   []string `name:"private-addr" sep:"," placeholder:"HOST:PORT" help:"Addresses in private ranges (192.168.0.0/16, 100.64.0.0/10, ...) answering HTTP, for the tool-call checks where verify knows none of its own."`
	StandinToken   string   `help:"Text the stand-ins' answers must contain for the control's reach to count (the e2e stand-ins answer sandbox-canary); empty accepts any HTTP answer."`
	ClusterDomain  string   `default:"${cluster_domain}" help:"Cluster DNS domain."`
	DNSCanaryZone  string   `name:"dns-canary-zone" help:"A zone the cluster DNS forwards to a server outside the cluster that answers every name in it with --dns-canary-answer: network/dns-exfiltration looks a fresh name up in it, from the control (which must get the answer) and from a sandbox (which must not)."`
	DNSCanaryAns   string   `name:"dns-canary-answer" placeholder:"IP" help:"The address the --dns-canary-zone server answers with."`
	MetadataAddr6  string   `name:"metadata-addr6" default:"[fd00:ec2::254]:80" help:"The metadata service's IPv6 address as [host]:port, probed where the cluster has IPv6; empty skips it."`
	RuntimeClass   string   `help:"runtimeClassName snippet pods must carry (empty: none configured)."`
	MemoryLimit    string   `default:"${snippet_memory}" help:"Memory limit snippet pods must carry."`
	Parallel       int      `default:"${parallel}" help:"Concurrent runs of the parallel check."`
	Only           []string `sep:"," enum:"lifecycle,posture,inside,network,runner,rbac,auth,toolcalls" help:"Run only these check groups (comma-separated)."`

	Output            string        `short:"o" default:"table" enum:"table,json,junit" help:"Report format: table, json or junit."`
	AllowInconclusive bool          `help:"Let INCONCLUSIVE checks pass (FAIL still fails)."`
	Timeout           time.Duration `default:"${verify_timeout}" help:"Bound on the whole run."`
	Keep              bool          `hidden:"" help:"Keep verify's namespace afterwards, for debugging."`
	List              bool          `help:"Print the catalogue of checks (what each proves, how it can fail) and exit."`
}

// Run verifies; the report goes to stdout, progress to stderr. It exits 1
// when any check FAILs, or is INCONCLUSIVE without --allow-inconclusive.
func (c *VerifyCmd) Run(d *Deps) error {
	if c.List {
		_, err := io.WriteString(d.Stdout, verify.Catalogue)
		return err
	}
	rep, err := verify.Run(d.Ctx, verify.Options{
		Namespace: c.Namespace, Service: c.Service, URL: c.URL, Kubeconfig: c.Kubeconfig, Context: c.Context,
		ServiceAccount: c.ServiceAccount, Caller: c.Caller, Audience: c.Audience, Image: c.Image, MetadataAddr: c.MetadataAddr, InternetAddr: c.InternetAddr, StandinToken: c.StandinToken,
		ToolImage: c.ToolImage, PrivateAddrs: c.PrivateAddrs,
		EgressImage: c.EgressImage, EgressAllowed: c.EgressAllowed, EgressOther: c.EgressOther, EgressRebind: c.EgressRebind,
		ClusterDomain: c.ClusterDomain, DNSCanaryZone: c.DNSCanaryZone, DNSCanaryAnswer: c.DNSCanaryAns, MetadataAddr6: c.MetadataAddr6, RuntimeClass: c.RuntimeClass, MemoryLimit: c.MemoryLimit, Parallel: c.Parallel,
		Only: c.Only, Timeout: c.Timeout, AllowInconclusive: c.AllowInconclusive, KeepFixtures: c.Keep,
		Progress: d.Stderr,
	})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if err := rep.Write(d.Stdout, c.Output); err != nil {
		return fmt.Errorf("verify: write report: %w", err)
	}
	if !rep.Summary.OK {
		return &ExitError{Code: 1}
	}
	return nil
}
