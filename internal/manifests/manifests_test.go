package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/pool"
)

// byKind indexes objects as "Kind/name".
func byKind(t *testing.T, objs []runtime.Object) map[string]runtime.Object {
	t.Helper()
	m := map[string]runtime.Object{}
	for _, o := range objs {
		gvk := o.GetObjectKind().GroupVersionKind()
		name := o.(interface{ GetName() string }).GetName()
		m[gvk.Kind+"/"+name] = o
	}
	return m
}

func mustObjects(t *testing.T, o Options) map[string]runtime.Object {
	t.Helper()
	objs, err := Objects(o)
	if err != nil {
		t.Fatal(err)
	}
	return byKind(t, objs)
}

func TestKinds(t *testing.T) {
	got := []string{}
	for k := range mustObjects(t, Options{}) {
		got = append(got, k)
	}
	sort.Strings(got)
	want := []string{
		"ClusterRole/sandbox-read-nodes", "ClusterRole/sandbox-review-tokens",
		"ClusterRoleBinding/sandbox-read-nodes", "ClusterRoleBinding/sandbox-review-tokens", "ConfigMap/sandbox-policy",
		"Deployment/sandbox", "Deployment/sandbox-egress", "Namespace/sandbox",
		"NetworkPolicy/default-deny", "NetworkPolicy/sandbox-egress", "NetworkPolicy/sandbox-runner", "NetworkPolicy/sandbox-runner-dns", "NetworkPolicy/sandbox-serve",
		"NetworkPolicy/sandbox-tool", "NetworkPolicy/sandbox-tool-dns", "NetworkPolicy/sandbox-tool-gateway", "NetworkPolicy/sandbox-tool-internet",
		"PodDisruptionBudget/sandbox", "PodDisruptionBudget/sandbox-egress", "Role/sandbox", "Role/sandbox-apiserver-endpoints", "Role/sandbox-egress",
		"RoleBinding/sandbox", "RoleBinding/sandbox-apiserver-endpoints", "RoleBinding/sandbox-egress", "Service/sandbox", "Service/sandbox-egress",
		"ServiceAccount/sandbox", "ServiceAccount/sandbox-egress",
		"ServiceAccount/sandbox-verify", "ServiceAccount/sandbox-verify-limited",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("kinds\n got %v\nwant %v", got, want)
	}
}

// TestDefaultsAreTheFiles: rendering with no options changes nothing, so
// `kubectl apply -k manifests/` and `sandbox manifests` deploy the same.
func TestDefaultsAreTheFiles(t *testing.T) {
	rendered, err := Objects(Options{})
	if err != nil {
		t.Fatal(err)
	}
	raw := decodeAll(t, nil)
	if len(raw) != len(rendered) {
		t.Fatalf("%d raw objects, %d rendered", len(raw), len(rendered))
	}
	for i := range raw {
		if !equality.Semantic.DeepEqual(raw[i], rendered[i]) {
			t.Errorf("object %d differs from its file after rendering with defaults:\n raw %+v\nrend %+v", i, raw[i], rendered[i])
		}
	}
}

// TestRenderParsesBack: the YAML stream decodes to the same objects.
func TestRenderParsesBack(t *testing.T) {
	o := Options{Namespace: "sb", Image: "reg.example/sandbox:v1", PoolSize: 7, RuntimeClass: "gvisor", APIServerCIDRs: []string{"192.0.2.10/32"}}
	out, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(o)
	if err != nil {
		t.Fatal(err)
	}
	back := decodeAll(t, out)
	if len(back) != len(objs) {
		t.Fatalf("%d documents, want %d", len(back), len(objs))
	}
	for i := range objs {
		if !equality.Semantic.DeepEqual(objs[i], back[i]) {
			t.Errorf("document %d does not round-trip", i)
		}
	}
	if bytes.Contains(out, []byte("creationTimestamp")) || bytes.Contains(out, []byte("status:")) {
		t.Errorf("rendered YAML carries empty fields:\n%s", out)
	}
}

func TestKustomizationListsEveryFile(t *testing.T) {
	listed, err := resources()
	if err != nil {
		t.Fatal(err)
	}
	all, err := fs.Glob(files, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	all = slices.DeleteFunc(all, func(s string) bool { return s == "kustomization.yaml" })
	sort.Strings(all)
	sort.Strings(listed)
	if !slices.Equal(all, listed) {
		t.Fatalf("kustomization.yaml lists %v, the directory has %v", listed, all)
	}
}

func TestOptionsApply(t *testing.T) {
	o := Options{Namespace: "sb", Image: "reg.example/sandbox:v1", PoolSize: 7, RuntimeClass: "gvisor", PodCPURequest: "100m", APIServerCIDRs: []string{"192.0.2.10/32", "10.0.0.1/32"},
		SnippetDNS: "cluster"}
	m := mustObjects(t, o)
	if got := deploymentEnv(t, mustObjects(t, Options{PoolSize: 5, PoolMax: 9}))["SANDBOX_POOL_MAX"]; got != "9" {
		t.Errorf("SANDBOX_POOL_MAX %q with --pool-max 9", got)
	}
	if _, ok := m["Namespace/sb"]; !ok {
		t.Fatal("no Namespace sb")
	}
	// The API server's endpoints are read in default, the nodes cluster-wide;
	// each grant is named for the installation.
	elsewhere := map[string]string{"ClusterRole/sandbox-read-nodes": "", "ClusterRoleBinding/sb-read-nodes": "",
		"ClusterRole/sandbox-review-tokens": "", "ClusterRoleBinding/sb-review-tokens": "",
		"Role/sb-apiserver-endpoints": "default", "RoleBinding/sb-apiserver-endpoints": "default"}
	for k, obj := range m {
		want, ok := elsewhere[k]
		if !ok && !strings.HasPrefix(k, "Namespace/") {
			want = "sb"
		} else if !ok {
			continue
		}
		delete(elsewhere, k)
		if ns := obj.(interface{ GetNamespace() string }).GetNamespace(); ns != want {
			t.Errorf("%s in namespace %q, want %q", k, ns, want)
		}
	}
	if len(elsewhere) > 0 {
		t.Errorf("missing %v", elsewhere)
	}
	if p := m["ConfigMap/sandbox-policy"].(*corev1.ConfigMap).Data["policy.yaml"]; !strings.Contains(p, "system:serviceaccount:sb:sandbox-verify") ||
		strings.Contains(p, "system:serviceaccount:sandbox:") {
		t.Errorf("the policy's grants to verify's callers are not in sb:\n%s", p)
	}
	for _, k := range []string{"ClusterRoleBinding/sb-read-nodes", "ClusterRoleBinding/sb-review-tokens", "RoleBinding/sb-apiserver-endpoints"} {
		if b, ok := m[k].(interface{ GetName() string }); ok {
			var subs []rbacv1.Subject
			switch x := b.(type) {
			case *rbacv1.ClusterRoleBinding:
				subs = x.Subjects
			case *rbacv1.RoleBinding:
				subs = x.Subjects
				if x.RoleRef.Name != "sb-apiserver-endpoints" {
					t.Errorf("%s binds %s", k, x.RoleRef.Name)
				}
			}
			if len(subs) != 1 || subs[0].Namespace != "sb" {
				t.Errorf("%s subjects %+v", k, subs)
			}
		}
	}
	rb := m["RoleBinding/sandbox"].(*rbacv1.RoleBinding)
	if rb.Subjects[0].Namespace != "sb" {
		t.Errorf("RoleBinding subject namespace %q", rb.Subjects[0].Namespace)
	}
	c := m["Deployment/sandbox"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if c.Image != o.Image || env["SANDBOX_IMAGE"] != o.Image || env["SANDBOX_POOL_SIZE"] != "7" || env["SANDBOX_RUNTIME_CLASS"] != "gvisor" || env["SANDBOX_POD_CPU_REQUEST"] != "100m" ||
		env["SANDBOX_SNIPPET_DNS"] != "cluster" {
		t.Errorf("image %s env %v", c.Image, env)
	}
	np := m["NetworkPolicy/sandbox-serve"].(*networkingv1.NetworkPolicy)
	var cidrs []string
	for _, p := range np.Spec.Egress[0].To {
		cidrs = append(cidrs, p.IPBlock.CIDR)
	}
	if !slices.Equal(cidrs, o.APIServerCIDRs) {
		t.Errorf("API server CIDRs %v", cidrs)
	}
}

func TestOptionsRejected(t *testing.T) {
	for name, o := range map[string]Options{
		"namespace":     {Namespace: "Not_A_Namespace"},
		"cidr":          {APIServerCIDRs: []string{"10.0.0.1"}},
		"pool size":     {PoolSize: -1},
		"pool max":      {PoolSize: 5, PoolMax: 4},
		"runtime class": {RuntimeClass: "G Visor"},
		"cpu request":   {PodCPURequest: "3"},
		"snippet dns":   {SnippetDNS: "open"},
	} {
		if _, err := Render(o); err == nil {
			t.Errorf("%s: accepted %+v", name, o)
		}
	}
}

func TestNamespaceEnforcesRestricted(t *testing.T) {
	ns := mustObjects(t, Options{})["Namespace/sandbox"].(*corev1.Namespace)
	for _, mode := range []string{"enforce", "audit", "warn"} {
		if v := ns.Labels["pod-security.kubernetes.io/"+mode]; v != "restricted" {
			t.Errorf("pod-security %s = %q", mode, v)
		}
	}
}

// TestRoleIsLeastPrivilege: pods create/get/list/watch/delete/patch; the
// tool pods' internet policy by name, to keep its excepts; the nodes and
// the API server's endpoints read only; nothing else -- no exec, no secrets,
// no wildcards, no other policy.
func TestRoleIsLeastPrivilege(t *testing.T) {
	m := mustObjects(t, Options{})
	type rule struct{ group, resource, names, verbs string }
	flat := func(rs []rbacv1.PolicyRule) []rule {
		var out []rule
		for _, r := range rs {
			verbs := slices.Clone(r.Verbs)
			sort.Strings(verbs)
			if len(r.NonResourceURLs) != 0 {
				t.Errorf("non-resource rule %+v", r)
			}
			out = append(out, rule{strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","), strings.Join(r.ResourceNames, ","), strings.Join(verbs, ",")})
		}
		return out
	}
	for _, tc := range []struct {
		key  string
		want []rule
	}{
		{"Role/sandbox", []rule{{"", "pods", "", "create,delete,get,list,patch,watch"},
			{"networking.k8s.io", "networkpolicies", "sandbox-tool-internet", "get,list,update,watch"},
			{"", "services", "sandbox-egress", "get,list,watch"},
			{"discovery.k8s.io", "endpointslices", "", "get,list,watch"},
			{"", "configmaps", "sandbox-policy", "get,list,watch"}}},
		{"Role/sandbox-egress", []rule{{"", "pods", "", "get,list,watch"}, {"networking.k8s.io", "networkpolicies", "sandbox-tool-internet", "get,list,watch"}}},
		{"Role/sandbox-apiserver-endpoints", []rule{{"discovery.k8s.io", "endpointslices", "", "get,list,watch"}}},
		{"ClusterRole/sandbox-read-nodes", []rule{{"", "nodes", "", "get,list,watch"}}},
		{"ClusterRole/sandbox-review-tokens", []rule{{"authentication.k8s.io", "tokenreviews", "", "create"}}},
	} {
		var got []rule
		switch x := m[tc.key].(type) {
		case *rbacv1.Role:
			got = flat(x.Rules)
		case *rbacv1.ClusterRole:
			got = flat(x.Rules)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s rules\n got %+v\nwant %+v", tc.key, got, tc.want)
		}
	}
	rb := m["RoleBinding/sandbox"].(*rbacv1.RoleBinding)
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "sandbox" || len(rb.Subjects) != 1 ||
		rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != "sandbox" {
		t.Fatalf("binding %+v", rb)
	}
	for k := range m {
		if strings.HasPrefix(k, "ClusterRole") && !strings.HasSuffix(k, "/sandbox-read-nodes") && !strings.HasSuffix(k, "/sandbox-review-tokens") {
			t.Errorf("cluster-wide RBAC: %s", k)
		}
	}
}

func TestDeploymentHardened(t *testing.T) {
	m := mustObjects(t, Options{})
	d := m["Deployment/sandbox"].(*appsv1.Deployment)
	s := d.Spec.Template.Spec
	if *d.Spec.Replicas != 2 || s.ServiceAccountName != "sandbox" || s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Errorf("replicas %d sa %q serviceLinks %v", *d.Spec.Replicas, s.ServiceAccountName, s.EnableServiceLinks)
	}
	if s.HostNetwork || s.HostPID || s.HostIPC {
		t.Error("host namespaces")
	}
	psc := s.SecurityContext
	if psc == nil || !*psc.RunAsNonRoot || *psc.RunAsUser == 0 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	c := s.Containers[0]
	sc := c.SecurityContext
	if *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v", sc)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("probes")
	}
	if !slices.Equal(c.Args[:3], []string{"serve", "--backend", "kubernetes"}) {
		t.Errorf("args %v", c.Args)
	}
	downward := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			downward[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if downward["POD_NAME"] != "metadata.name" || downward["POD_UID"] != "metadata.uid" || downward["SANDBOX_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("downward API env %v", downward)
	}
	svc := m["Service/sandbox"].(*corev1.Service)
	if p := svc.Spec.Ports[0]; p.Port != 80 || p.TargetPort.StrVal != "http" || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("service port %+v, container port %+v", p, c.Ports[0])
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Error("Service does not select the Deployment's pods")
	}
}

// TestNoGapInService: what keeps the Service an endpoint while serve pods
// come and go. Two replicas, spread across nodes; a rollout that starts a new pod before it stops
// an old one; a disruption budget that leaves one; a pause before SIGTERM
// while kube-proxy forgets the deleted pod, inside the grace period with
// room for the longest run.
func TestNoGapInService(t *testing.T) {
	m := mustObjects(t, Options{})
	d := m["Deployment/sandbox"].(*appsv1.Deployment)
	if *d.Spec.Replicas < 2 {
		t.Errorf("replicas %d: one replica leaves the Service empty whenever it restarts", *d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() < 1 {
		t.Errorf("rolling update %+v: want maxUnavailable 0, maxSurge at least 1", ru)
	}
	pdb := m["PodDisruptionBudget/sandbox"].(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
		t.Errorf("disruption budget minAvailable %v with %d replicas: want at least 1 and below the replicas, so drains can proceed", pdb.Spec.MinAvailable, *d.Spec.Replicas)
	}
	if !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Error("the disruption budget does not select the Deployment's pods")
	}
	spread := false
	for _, tc := range d.Spec.Template.Spec.TopologySpreadConstraints {
		if tc.TopologyKey == "kubernetes.io/hostname" && tc.MaxSkew == 1 && tc.LabelSelector != nil && selects(tc.LabelSelector.MatchLabels, d.Spec.Template.Labels) {
			spread = true
		}
	}
	if !spread {
		t.Error("no spread of the replicas across nodes: one lost node could take them all")
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 2 {
		t.Fatalf("preStop %+v: want a sleep of a few seconds before SIGTERM", c.Lifecycle)
	}
	grace := *d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if need := c.Lifecycle.PreStop.Sleep.Seconds + 70; grace < need {
		t.Errorf("terminationGracePeriodSeconds %d: the preStop pause and serve's 70 s shutdown need %d", grace, need)
	}
}

func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func TestNetworkPolicies(t *testing.T) {
	m := mustObjects(t, Options{})
	serveLabels := m["Deployment/sandbox"].(*appsv1.Deployment).Spec.Template.Labels
	// What the pool puts on sandbox pods.
	runnerLabels := kube.SnippetPod(kube.PodOptions{Namespace: "sandbox", Image: "x", Owner: kube.Owner{Name: "o"}}, "p", kube.MinUID).Labels

	deny := m["NetworkPolicy/default-deny"].(*networkingv1.NetworkPolicy)
	if len(deny.Spec.PodSelector.MatchLabels)+len(deny.Spec.PodSelector.MatchExpressions) != 0 ||
		len(deny.Spec.Ingress)+len(deny.Spec.Egress) != 0 || len(deny.Spec.PolicyTypes) != 2 {
		t.Errorf("default-deny %+v", deny.Spec)
	}

	runner := m["NetworkPolicy/sandbox-runner"].(*networkingv1.NetworkPolicy)
	if !selects(runner.Spec.PodSelector.MatchLabels, runnerLabels) || selects(runner.Spec.PodSelector.MatchLabels, serveLabels) {
		t.Errorf("sandbox-runner selects %v", runner.Spec.PodSelector.MatchLabels)
	}
	// Sealed pods (the default): no egress at all, not even DNS.
	if len(runner.Spec.Egress) != 0 || !slices.Contains(runner.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Fatalf("runner egress %+v: a sealed snippet pod must reach nothing", runner.Spec.Egress)
	}
	// Cluster-mode pods alone get port 53 to the cluster DNS pods.
	clusterLabels := kube.SnippetPod(kube.PodOptions{Namespace: "sandbox", Image: "x", Owner: kube.Owner{Name: "o"}, DNS: kube.DNSCluster}, "p", kube.MinUID).Labels
	dnsPol := m["NetworkPolicy/sandbox-runner-dns"].(*networkingv1.NetworkPolicy)
	if !selects(dnsPol.Spec.PodSelector.MatchLabels, clusterLabels) || selects(dnsPol.Spec.PodSelector.MatchLabels, runnerLabels) ||
		len(dnsPol.Spec.Ingress) != 0 || len(dnsPol.Spec.Egress) != 1 {
		t.Fatalf("sandbox-runner-dns %+v: want egress for cluster-mode snippet pods only", dnsPol.Spec)
	}
	eg := dnsPol.Spec.Egress[0]
	if len(eg.To) != 1 || eg.To[0].IPBlock != nil || eg.To[0].NamespaceSelector == nil ||
		eg.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" ||
		eg.To[0].PodSelector == nil || eg.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("runner DNS egress peers %+v: want kube-system's kube-dns pods only", eg.To)
	}
	var ports []string
	for _, p := range eg.Ports {
		ports = append(ports, string(*p.Protocol)+"/"+p.Port.String())
	}
	sort.Strings(ports)
	if !slices.Equal(ports, []string{"TCP/53", "UDP/53"}) {
		t.Errorf("runner DNS egress ports %v", ports)
	}
	if len(runner.Spec.Ingress) != 1 || len(runner.Spec.Ingress[0].From) != 1 ||
		!selects(runner.Spec.Ingress[0].From[0].PodSelector.MatchLabels, serveLabels) ||
		runner.Spec.Ingress[0].From[0].NamespaceSelector != nil || runner.Spec.Ingress[0].Ports[0].Port.IntValue() != kube.DefaultRunnerPort {
		t.Errorf("runner ingress %+v: want only serve pods on the runner port", runner.Spec.Ingress)
	}

	serve := m["NetworkPolicy/sandbox-serve"].(*networkingv1.NetworkPolicy)
	if !selects(serve.Spec.PodSelector.MatchLabels, serveLabels) || selects(serve.Spec.PodSelector.MatchLabels, runnerLabels) {
		t.Errorf("sandbox-serve selects %v", serve.Spec.PodSelector.MatchLabels)
	}
	toolLabels := kube.ToolPod(kube.ToolPodOptions{Namespace: "sandbox", Image: "x", SandboxImage: "y", Owner: kube.Owner{Name: "o"}}, "p", kube.MinUID).Labels
	if len(serve.Spec.Egress) != 3 || !selects(serve.Spec.Egress[1].To[0].PodSelector.MatchLabels, runnerLabels) ||
		!selects(serve.Spec.Egress[2].To[0].PodSelector.MatchLabels, toolLabels) {
		t.Errorf("serve egress %+v", serve.Spec.Egress)
	}
}

// decodeAll decodes a YAML stream (the embedded files when b is nil).
func decodeAll(t *testing.T, b []byte) []runtime.Object {
	t.Helper()
	var streams [][]byte
	if b == nil {
		names, err := resources()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			f, err := files.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, f)
		}
	} else {
		streams = [][]byte{b}
	}
	var out []runtime.Object
	for _, s := range streams {
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(s)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			obj.GetObjectKind().SetGroupVersionKind(*gvk)
			out = append(out, obj)
		}
	}
	return out
}

func deploymentEnv(t *testing.T, m map[string]runtime.Object) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range m["Deployment/sandbox"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	return env
}

// TestPoolMaxFollowsPoolSize: the files' 12 is 4 × their 3; another pool
// size without --pool-max gets the same factor, not the files' number.
func TestPoolMaxFollowsPoolSize(t *testing.T) {
	if got := deploymentEnv(t, mustObjects(t, Options{}))["SANDBOX_POOL_MAX"]; got != strconv.Itoa(pool.DefaultMaxFactor*DefaultPoolSize) {
		t.Errorf("default SANDBOX_POOL_MAX %q, want %d × %d", got, pool.DefaultMaxFactor, DefaultPoolSize)
	}
	if got := deploymentEnv(t, mustObjects(t, Options{PoolSize: 5}))["SANDBOX_POOL_MAX"]; got != strconv.Itoa(pool.DefaultMaxFactor*5) {
		t.Errorf("SANDBOX_POOL_MAX %q with --pool-size 5", got)
	}
}

// TestServeIngressOnlyFromClients: serve's ingress admits the namespaces
// labelled ClientLabel, and nothing else.
func TestServeIngressOnlyFromClients(t *testing.T) {
	np := mustObjects(t, Options{})["NetworkPolicy/sandbox-serve"].(*networkingv1.NetworkPolicy)
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 {
		t.Fatalf("ingress %+v, want one rule from one peer", np.Spec.Ingress)
	}
	peer := np.Spec.Ingress[0].From[0]
	if peer.PodSelector != nil || peer.IPBlock != nil || peer.NamespaceSelector == nil ||
		len(peer.NamespaceSelector.MatchExpressions) != 0 || len(peer.NamespaceSelector.MatchLabels) != 1 ||
		peer.NamespaceSelector.MatchLabels[ClientLabel] != "true" {
		t.Errorf("ingress peer %+v, want only namespaces labelled %s=true", peer, ClientLabel)
	}
}
