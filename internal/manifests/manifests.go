// Package manifests holds the Kubernetes manifests that deploy the sandbox
// service, embedded in the binary. The YAML files here are complete and
// usable as they are (`kubectl apply -k manifests/`); Render fills the same
// files with other values for `sandbox manifests`.
package manifests

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/pool"
)

//go:embed kustomization.yaml *.yaml
var files embed.FS

// Defaults: what the files say, and so what `kubectl apply -k` deploys.
const (
	DefaultNamespace = "sandbox"
	DefaultImage     = "sandbox:dev"
	DefaultPoolSize  = pool.DefaultSize
)

// DefaultAPIServerCIDRs let the service reach the API server on kind: the
// kubernetes Service's ClusterIP and Docker's default address pools, where
// kind's nodes (and so the API server endpoint) live.
var DefaultAPIServerCIDRs = []string{"10.96.0.1/32", "172.16.0.0/12"}

// Names of the objects Render edits.
// ClientLabel, set to "true" on a namespace, lets its pods reach serve
// (serve's ingress policy); the caller policy still judges each caller.
const ClientLabel = "sandbox.dev/client"

const (
	deploymentName  = "sandbox"
	containerName   = "serve"
	servePolicyName = "sandbox-serve"
	// The egress gateway's Deployment, container and policy.
	egressName      = "sandbox-egress"
	egressContainer = "egress"
)

// Options are the knobs of the rendered manifests. Zero values keep the
// files' defaults.
type Options struct {
	Namespace      string
	Image          string   // the service's and the sandbox pods' image
	PoolSize       int      // warm pods the service keeps: the floor
	PoolMax        int      // the most unclaimed pods under demand (0: pool.DefaultMaxFactor × PoolSize)
	RuntimeClass   string   // runtimeClassName of sandbox pods, e.g. gvisor
	PodCPURequest  string   // CPU request of sandbox pods ("" = their 1-CPU limit)
	APIServerCIDRs []string // where the service may reach the API server
	// ToolImages is the allow list of tool-call images; empty leaves
	// /v1/call off.
	ToolImages []string
	// ToolEgressDeny are prefixes of the cluster's machines no API object
	// lists, which serve keeps out of tool pods' internet too.
	ToolEgressDeny []string
	// NoToolInternet leaves tool pods DNS only (the default gives them the
	// internet, never private ranges).
	NoToolInternet bool
	// ToolReadyTimeout is how long a call waits for its pod to be Ready
	// (0 keeps the files' 110 s).
	ToolReadyTimeout time.Duration
	// SnippetDNS is the snippet pods' DNS mode, kube.DNSSealed or
	// kube.DNSCluster ("" keeps the files' sealed).
	SnippetDNS string
	// ToolDefaultEgress is the egress of an image ToolImages gives none:
	// "internet" (the files') or "none".
	ToolDefaultEgress string
	// EgressPermit are addresses the egress gateway dials despite their
	// range: a test rig's stand-ins, never production. (ToolEgressDeny is
	// the gateway's --deny too.)
	EgressPermit []string
}

func (o *Options) defaults() error {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	if len(o.APIServerCIDRs) == 0 {
		o.APIServerCIDRs = DefaultAPIServerCIDRs
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %v", o.Namespace, errs)
	}
	if o.PoolSize < 1 {
		return fmt.Errorf("pool size %d: must be at least 1", o.PoolSize)
	}
	if o.PoolMax == 0 {
		o.PoolMax = pool.DefaultMaxFactor * o.PoolSize
	}
	if o.PoolMax < o.PoolSize {
		return fmt.Errorf("pool max %d: must be at least the pool size %d", o.PoolMax, o.PoolSize)
	}
	if o.RuntimeClass != "" {
		if errs := validation.IsDNS1123Subdomain(o.RuntimeClass); len(errs) > 0 {
			return fmt.Errorf("runtime class %q: %v", o.RuntimeClass, errs)
		}
	}
	if err := kube.ValidateCPURequest(o.PodCPURequest); err != nil {
		return err
	}
	for _, c := range o.APIServerCIDRs {
		if _, _, err := net.ParseCIDR(c); err != nil {
			return fmt.Errorf("api server CIDR: %w", err)
		}
	}
	ims, err := egress.ParseImages(o.ToolImages)
	if err != nil {
		return err
	}
	if err := api.ValidateImagePatterns(ims.Patterns()); err != nil {
		return err
	}
	if _, err := kube.ParsePrefixes(o.ToolEgressDeny); err != nil {
		return fmt.Errorf("tool egress deny: %w", err)
	}
	if _, err := kube.ParsePrefixes(o.EgressPermit); err != nil {
		return fmt.Errorf("egress permit: %w", err)
	}
	switch o.ToolDefaultEgress {
	case "":
		o.ToolDefaultEgress = string(egress.Internet)
	case string(egress.Internet), string(egress.None):
	default:
		return fmt.Errorf("tool default egress %q: want internet or none", o.ToolDefaultEgress)
	}
	if o.SnippetDNS == "" {
		o.SnippetDNS = kube.DefaultDNS
	}
	return kube.ValidateDNS(o.SnippetDNS)
}

// Objects returns the manifests as typed objects, in apply order, with o's
// values filled in.
func Objects(o Options) ([]runtime.Object, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	names, err := resources()
	if err != nil {
		return nil, err
	}
	decoder := scheme.Codecs.UniversalDeserializer()
	var objs []runtime.Object
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("split %s: %w", name, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("decode %s: %w", name, err)
			}
			obj.GetObjectKind().SetGroupVersionKind(*gvk)
			if err := fill(obj, o); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

// Render returns the manifests as one multi-document YAML stream for
// `kubectl apply -f -`.
func Render(o Options) ([]byte, error) {
	objs, err := Objects(o)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for i, obj := range objs {
		b, err := marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(b)
	}
	return out.Bytes(), nil
}

// resources lists the files kustomization.yaml names, in its order.
func resources() ([]string, error) {
	b, err := files.ReadFile("kustomization.yaml")
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("parse kustomization.yaml: %w", err)
	}
	if len(k.Resources) == 0 {
		return nil, errors.New("kustomization.yaml lists no resources")
	}
	for _, r := range k.Resources {
		if path.Dir(r) != "." {
			return nil, fmt.Errorf("kustomization.yaml: resource %q is not a file here", r)
		}
	}
	return k.Resources, nil
}

// fillSubjects points service-account subjects at o's namespace.
func fillSubjects(subjects []rbacv1.Subject, o Options) {
	for i := range subjects {
		if subjects[i].Kind == rbacv1.ServiceAccountKind {
			subjects[i].Namespace = o.Namespace
		}
	}
}

// fill writes o's values into obj.
func fill(obj runtime.Object, o Options) error {
	switch x := obj.(type) {
	case *corev1.Namespace:
		x.Name = o.Namespace
		return nil
	case *rbacv1.RoleBinding:
		if x.Namespace == metav1.NamespaceDefault {
			// Grants in default (the API server's endpoints) stay there,
			// named for the installation.
			x.Name = o.Namespace + "-apiserver-endpoints"
			x.RoleRef.Name = x.Name
		} else {
			x.Namespace = o.Namespace
		}
		fillSubjects(x.Subjects, o)
		return nil
	case *rbacv1.ClusterRoleBinding:
		// sandbox-read-nodes becomes <namespace>-read-nodes: one per
		// installation.
		x.Name = o.Namespace + strings.TrimPrefix(x.Name, "sandbox")
		fillSubjects(x.Subjects, o)
		return nil
	case *corev1.ConfigMap:
		x.Namespace = o.Namespace
		return fillPolicy(x, o)
	case *rbacv1.ClusterRole:
		return nil
	case *appsv1.Deployment:
		x.Namespace = o.Namespace
		switch x.Name {
		case deploymentName:
			return fillDeployment(x, o)
		case egressName:
			return fillEnv(x, egressContainer, o.Image, map[string]string{
				"SANDBOX_EGRESS_DENY":   strings.Join(o.ToolEgressDeny, ","),
				"SANDBOX_EGRESS_PERMIT": strings.Join(o.EgressPermit, ","),
			})
		}
		return nil
	case *networkingv1.NetworkPolicy:
		x.Namespace = o.Namespace
		if x.Name == servePolicyName || x.Name == egressName {
			return fillAPIServerRule(x, o)
		}
		return nil
	case *corev1.ServiceAccount:
		x.Namespace = o.Namespace
	case *rbacv1.Role:
		if x.Namespace == metav1.NamespaceDefault {
			x.Name = o.Namespace + "-apiserver-endpoints"
			return nil
		}
		x.Namespace = o.Namespace
	case *corev1.Service:
		x.Namespace = o.Namespace
	case *policyv1.PodDisruptionBudget:
		x.Namespace = o.Namespace
	default:
		return fmt.Errorf("unexpected kind %T: teach manifests.fill about it", obj)
	}
	return nil
}

func fillDeployment(d *appsv1.Deployment, o Options) error {
	set := map[string]string{
		"SANDBOX_IMAGE":                o.Image,
		"SANDBOX_POOL_SIZE":            strconv.Itoa(o.PoolSize),
		"SANDBOX_POOL_MAX":             strconv.Itoa(o.PoolMax),
		"SANDBOX_RUNTIME_CLASS":        o.RuntimeClass,
		"SANDBOX_POD_CPU_REQUEST":      o.PodCPURequest,
		"SANDBOX_TOOL_IMAGES":          strings.Join(o.ToolImages, ";"),
		"SANDBOX_TOOL_DEFAULT_EGRESS":  o.ToolDefaultEgress,
		"SANDBOX_TOOL_INTERNET_EGRESS": strconv.FormatBool(!o.NoToolInternet),
		"SANDBOX_TOOL_EGRESS_DENY":     strings.Join(o.ToolEgressDeny, ","),
		"SANDBOX_SNIPPET_DNS":          o.SnippetDNS,
	}
	if o.ToolReadyTimeout > 0 {
		set["SANDBOX_TOOL_READY_TIMEOUT"] = o.ToolReadyTimeout.String()
	}
	return fillEnv(d, containerName, o.Image, set)
}

// fillEnv sets the image of d's container and the values of its env
// variables in set, each of which the file must already have.
func fillEnv(d *appsv1.Deployment, container, image string, set map[string]string) error {
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		if c.Name != container {
			continue
		}
		c.Image = image
		for j := range c.Env {
			if v, ok := set[c.Env[j].Name]; ok {
				c.Env[j].Value = v
				delete(set, c.Env[j].Name)
			}
		}
		if len(set) > 0 {
			return fmt.Errorf("deployment %s: container %s lacks env %v", d.Name, container, set)
		}
		return nil
	}
	return fmt.Errorf("deployment %s: no container %q", d.Name, container)
}

// fillAPIServerRule replaces the API server rule's addresses (serve's and
// the gateway's): the first rule whose peers are ipBlocks.
func fillAPIServerRule(np *networkingv1.NetworkPolicy, o Options) error {
	for i := range np.Spec.Egress {
		rule := &np.Spec.Egress[i]
		if len(rule.To) == 0 || rule.To[0].IPBlock == nil {
			continue
		}
		rule.To = nil
		if err := kube.ValidateCPURequest(o.PodCPURequest); err != nil {
			return err
		}
		for _, c := range o.APIServerCIDRs {
			rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
		}
		return nil
	}
	return fmt.Errorf("networkpolicy %s: no ipBlock rule for the API server", np.Name)
}

// marshal writes obj as YAML without the empty fields a typed object always
// has (creationTimestamp: null, status: {}).
func marshal(obj runtime.Object) ([]byte, error) {
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if spec, ok := m["spec"].(map[string]any); ok && len(spec) == 0 {
		delete(m, "spec") // a Namespace's
	}
	dropNullTimestamps(m)
	return yaml.Marshal(m)
}

func dropNullTimestamps(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "creationTimestamp" && val == nil {
				delete(x, k)
				continue
			}
			dropNullTimestamps(val)
		}
	case []any:
		for _, val := range x {
			dropNullTimestamps(val)
		}
	}
}

// stripComments drops comment-only lines, so a document holding nothing but
// comments is recognised as empty.
func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(doc) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			continue
		}
		out.Write(line)
	}
	return out.Bytes()
}

// fillPolicy points the caller policy's grants to verify's ServiceAccounts
// at o's namespace.
func fillPolicy(cm *corev1.ConfigMap, o Options) error {
	for k, v := range cm.Data {
		cm.Data[k] = strings.ReplaceAll(v, "system:serviceaccount:"+DefaultNamespace+":", "system:serviceaccount:"+o.Namespace+":")
	}
	return nil
}
