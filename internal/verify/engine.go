package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/kube"
)

// Options are verify's settings; modes/verify.go maps flags onto them.
type Options struct {
	Namespace  string // where serve and its snippet pods run
	Service    string // serve's Service (and Deployment) name
	URL        string // the service's base URL; "" opens a port-forward
	Kubeconfig string
	Context    string
	// ServiceAccount is serve's ServiceAccount, whose rights the RBAC check reviews.
	ServiceAccount string
	// Caller is the ServiceAccount of Namespace verify calls serve as, with
	// a token it mints for Audience.
	Caller   string
	Audience string
	// Image runs verify's canary and control; "" takes serve's own image.
	Image string
	// MetadataAddr and InternetAddr are the stand-ins (host:port answering
	// HTTP); "" skips the target.
	MetadataAddr string
	InternetAddr string
	// StandinToken, when set, must be in the stand-ins' answers for the
	// control's reach to count (the e2e stand-ins say "sandbox-canary").
	StandinToken string
	// ToolImage is the image the tool-call checks call builtins:exec in;
	// "" takes the first exact entry of the Deployment's SANDBOX_TOOL_IMAGES.
	ToolImage string
	// EgressImage is the image with names the egress checks call (""
	// takes the first exact entry of SANDBOX_TOOL_IMAGES that has names);
	// EgressAllowed a host:port on its list answering TLS, EgressOther an
	// internet name not on it, EgressRebind names on it that resolve into
	// private ranges.
	EgressImage   string
	EgressAllowed string
	EgressOther   string
	EgressRebind  []string
	// PrivateAddrs are host:port targets answering HTTP (with StandinToken)
	// in private ranges where verify knows no address of its own.
	PrivateAddrs []string
	// ClusterDomain builds the DNS name the sandbox must resolve.
	ClusterDomain string
	// DNSCanaryZone is a zone whose server, outside the cluster, the
	// cluster DNS forwards to and which answers every name in it with
	// DNSCanaryAnswer (the e2e cluster's exfil.sandbox.test): the lookup of
	// a fresh name in it shows whether a snippet's query leaves. "" looks
	// up a name in a reserved zone instead, judged by the sandbox alone.
	DNSCanaryZone   string
	DNSCanaryAnswer string
	// MetadataAddr6 is the metadata service's IPv6 address (host:port),
	// probed where the cluster has IPv6.
	MetadataAddr6 string
	// RuntimeClass is the runtimeClassName snippet pods must carry; "" means
	// none is configured.
	RuntimeClass string
	// MemoryLimit is the snippet pod's expected memory limit.
	MemoryLimit string
	// Parallel is how many concurrent runs the parallel check makes.
	Parallel int
	// Only runs the named groups (lifecycle, posture, inside, network,
	// runner, rbac, toolcalls); empty runs all.
	Only []string
	// Timeout bounds the whole run.
	Timeout time.Duration
	// AllowInconclusive lets INCONCLUSIVE checks pass the run.
	AllowInconclusive bool
	// KeepFixtures leaves verify's namespace in place, for debugging.
	KeepFixtures bool
	// Progress receives one line per step (stderr).
	Progress io.Writer
}

// Groups lists the check groups in the order they run.
var Groups = []string{"lifecycle", "posture", "inside", "network", "runner", "rbac", "toolcalls"}

// env is what the checks share.
type env struct {
	opts     Options
	cfg      *rest.Config
	cs       kubernetes.Interface
	sb       sandboxAPI
	pods     *podWatch
	fwd      *forward
	verifyNS string
	image    string

	fx     *fixtures
	fxErr  error
	fxDone chan struct{}

	target  map[string]string
	network *netRun // the network step's outcomes, for the caveats
	start   time.Time
}

func (e *env) progress(format string, args ...any) {
	if e.opts.Progress != nil {
		fmt.Fprintf(e.opts.Progress, "verify [%5.1fs] %s\n", time.Since(e.start).Seconds(), fmt.Sprintf(format, args...))
	}
}

type step struct {
	group string
	what  string
	run   func(context.Context, *env) []Result
}

var steps = []step{
	{"lifecycle", "two runs in a row share nothing", checkReuse},
	{"lifecycle", "concurrent runs get distinct pods", checkParallel},
	{"posture", "Pod Security admission of the namespace", checkPSA},
	{"posture", "live spec of a warm snippet pod", checkPodSpec},
	{"inside", "identity, capabilities, seccomp, mounts from inside a sandbox", checkInside},
	{"network", "control pods first, then a sandbox, at every target", checkNetwork},
	{"runner", "timeout kills the whole process tree", checkTimeout},
	{"runner", "output flood", checkFlood},
	{"runner", "memory bomb", checkMemoryBomb},
	{"runner", "fork bomb", checkForkBomb},
	{"runner", "input file paths", checkPaths},
	{"rbac", "the service account's rights", checkRBAC},
	{"auth", "callers named, granted and bounded", checkAuth},
	{"toolcalls", "tool-call pods", checkToolCalls},
}

// Run verifies the deployment and returns the report. An error means verify
// could not start (no cluster, no service); everything found after that is in
// the report. Verify's own namespace is deleted before Run returns, with a
// context of its own, also when ctx was cancelled.
func Run(ctx context.Context, opts Options) (*Report, error) {
	setDefaults(&opts)
	e := &env{opts: opts, start: time.Now(), target: map[string]string{"namespace": opts.Namespace}}
	rep := &Report{}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	var err error
	e.cfg, e.cs, err = Clients(opts.Kubeconfig, opts.Context)
	if err != nil {
		return nil, err
	}
	if err := e.discover(ctx); err != nil {
		return nil, err
	}
	token, err := mintToken(ctx, e.cs, opts.Namespace, opts.Caller, opts.Audience, opts.Timeout)
	if err != nil {
		return nil, err
	}
	e.target["caller"] = "system:serviceaccount:" + opts.Namespace + ":" + opts.Caller
	if token == "" {
		e.target["caller"] = "none: no ServiceAccount " + opts.Namespace + "/" + opts.Caller + " to mint a token for"
	}
	if opts.URL != "" {
		e.sb = newHTTPSandbox(opts.URL, token)
		e.target["url"] = opts.URL
	} else {
		e.progress("port-forward to service %s/%s", opts.Namespace, opts.Service)
		e.fwd, err = forwardService(ctx, e.cfg, e.cs, opts.Namespace, opts.Service)
		if err != nil {
			return nil, err
		}
		defer e.fwd.Close()
		e.sb = newHTTPSandbox(e.fwd.URL, token)
		e.target["url"] = fmt.Sprintf("port-forward %s -> pod %s", e.fwd.URL, e.fwd.Pod)
	}
	e.pods, err = watchSnippetPods(ctx, e.cs, opts.Namespace)
	if err != nil {
		return nil, err
	}
	defer e.pods.Close()

	if e.wants("network") || e.wants("toolcalls") {
		e.verifyNS = "sandbox-verify-" + randomHex(3)
		e.fxDone = make(chan struct{})
		e.progress("deploying canary and control in namespace %s (image %s)", e.verifyNS, e.image)
		go func() {
			defer close(e.fxDone)
			e.fx, e.fxErr = deployFixtures(ctx, e.cs, e.verifyNS, e.image)
		}()
		defer func() {
			<-e.fxDone
			if opts.KeepFixtures {
				e.progress("keeping namespace %s (--keep)", e.verifyNS)
				return
			}
			e.progress("deleting namespace %s", e.verifyNS)
			if cerr := cleanupFixtures(e.cs, e.verifyNS); cerr != nil {
				// The report stands; the leftover namespace is the user's to delete.
				e.progress("cleanup failed, delete namespace %s by hand: %v", e.verifyNS, cerr)
			}
		}()
	}

	for i, s := range steps {
		if !e.wants(s.group) {
			continue
		}
		if ctx.Err() != nil {
			rep.Checks = append(rep.Checks, result(fmt.Sprintf("%s/step-%d-not-run", s.group, i+1), "", Inconclusive, "%s: not run: %v", s.what, context.Cause(ctx)))
			continue
		}
		e.progress("[%d/%d] %s: %s", i+1, len(steps), s.group, s.what)
		t0 := time.Now()
		rs := s.run(ctx, e)
		d := time.Since(t0)
		for _, r := range rs {
			// A check cut short by the user or --timeout proved nothing either way.
			if ctx.Err() != nil && r.Status == Fail {
				r.Status = Inconclusive
				r.Evidence = fmt.Sprintf("interrupted (%v): %s", context.Cause(ctx), r.Evidence)
			}
			if r.DurationMS == 0 {
				r.DurationMS = d.Milliseconds()
			}
			rep.Checks = append(rep.Checks, r)
			e.progress("    %-12s %s", r.Status, r.Name)
		}
	}
	// The caveats read the cluster once more, also after an interrupt.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer ccancel()
	rep.Caveats = e.caveats(cctx)
	rep.Target = e.target
	rep.Finish(time.Since(e.start), opts.AllowInconclusive)
	return rep, nil
}

// Defaults of Options; the verify command's flags show them.
const (
	// DefaultName is the namespace, Service, Deployment and ServiceAccount
	// of the service, as the manifests name them.
	DefaultName          = "sandbox"
	DefaultClusterDomain = "cluster.local"
	// DefaultParallel is how many runs the parallel check starts at once.
	DefaultParallel = 3
	// DefaultTimeout bounds a whole run, far above the 20 to 30 s one takes
	// on kind, so that only a hung deployment reaches it.
	DefaultTimeout = 10 * time.Minute
)

func setDefaults(o *Options) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.Namespace, DefaultName)
	def(&o.Service, DefaultName)
	def(&o.ServiceAccount, DefaultName)
	def(&o.Caller, DefaultCaller)
	def(&o.Audience, auth.DefaultAudience)
	def(&o.ClusterDomain, DefaultClusterDomain)
	def(&o.MemoryLimit, kube.SnippetMemory)
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
}

func (e *env) wants(group string) bool {
	if len(e.opts.Only) == 0 {
		return true
	}
	for _, g := range e.opts.Only {
		if strings.TrimSpace(g) == group {
			return true
		}
	}
	return false
}

// discover checks that the deployment exists and learns serve's image.
func (e *env) discover(ctx context.Context) error {
	if _, err := e.cs.CoreV1().Namespaces().Get(ctx, e.opts.Namespace, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("namespace %s: %w", e.opts.Namespace, err)
	}
	e.image = e.opts.Image
	dep, err := e.cs.AppsV1().Deployments(e.opts.Namespace).Get(ctx, e.opts.Service, metav1.GetOptions{})
	if err == nil {
		e.target["deployment"] = fmt.Sprintf("%s/%s (%d/%d ready)", e.opts.Namespace, dep.Name, dep.Status.ReadyReplicas, deref(dep.Spec.Replicas))
		if e.image == "" {
			e.image = deploymentImage(dep)
		}
	}
	if e.image == "" {
		e.image = "sandbox:dev"
	}
	e.target["fixture_image"] = e.image
	return nil
}

func deploymentImage(d *appsv1.Deployment) string {
	if cs := d.Spec.Template.Spec.Containers; len(cs) > 0 {
		return cs[0].Image
	}
	return ""
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// waitFixtures waits for the canary and control.
func (e *env) waitFixtures(ctx context.Context) (*fixtures, error) {
	if e.fxDone == nil {
		return nil, errors.New("fixtures were not deployed")
	}
	select {
	case <-e.fxDone:
		return e.fx, e.fxErr
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
