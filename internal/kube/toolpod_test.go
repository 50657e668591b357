package kube

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/internal/weaken"
)

func TestToolPodHardened(t *testing.T) {
	o := ToolPodOptions{Namespace: "sandbox", SandboxImage: "sandbox:dev", Image: "agent:1", Owner: Owner{Name: "serve-0", UID: "u"},
		Python: "/usr/local/bin/python3.12", MaxTimeout: 2 * time.Minute, ActiveDeadline: 5 * time.Minute,
		Seal: SealOptions{Probes: []string{"10.96.0.1:443"}, DNS: []string{"10.96.0.10:53"}}}
	p := ToolPod(o, "sandbox-tool-abcde", 123456)
	s := p.Spec
	if *s.AutomountServiceAccountToken || *s.EnableServiceLinks || s.HostNetwork || s.HostPID || s.HostIPC ||
		s.RestartPolicy != corev1.RestartPolicyNever || *s.ActiveDeadlineSeconds != 300 || *s.TerminationGracePeriodSeconds != 0 {
		t.Errorf("pod spec %+v", s)
	}
	if !*s.SecurityContext.RunAsNonRoot || *s.SecurityContext.RunAsUser != 123456 || s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", s.SecurityContext)
	}
	if len(s.InitContainers) != 1 || len(s.Containers) != 1 {
		t.Fatalf("containers: %d init, %d", len(s.InitContainers), len(s.Containers))
	}
	for _, c := range append(s.InitContainers, s.Containers...) {
		sc := c.SecurityContext
		if !*sc.RunAsNonRoot || *sc.RunAsUser != 123456 || *sc.AllowPrivilegeEscalation || *sc.Privileged || !*sc.ReadOnlyRootFilesystem ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s security context %+v", c.Name, sc)
		}
		if c.Resources.Limits.Cpu().String() != ToolCPU || c.Resources.Limits.Memory().String() != ToolMemory {
			t.Errorf("container %s limits %v", c.Name, c.Resources.Limits)
		}
		// Only the runner's node address, which ToolEnv keeps from the tool.
		env := slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool { return e.Name == seal.NodeIPEnv })
		if len(env) != 0 || len(c.EnvFrom) != 0 {
			t.Errorf("container %s has env %v: the tool's must be the image's own", c.Name, env)
		}
	}
	main := s.Containers[0]
	if main.Image != "agent:1" || main.WorkingDir != "" || main.Command[0] != ToolBinDir+"/sandbox" ||
		!slices.Contains(main.Args, "--call") || !slices.Contains(main.Args, "/usr/local/bin/python3.12") ||
		!slices.Contains(main.Args, "2m0s") {
		t.Errorf("main container %s %v %v (workdir %q)", main.Image, main.Command, main.Args, main.WorkingDir)
	}
	// Ready on the runner's proof that the API server is cut; the tool pod
	// keeps the cluster DNS its internet egress needs, so no DNS proof.
	if i := slices.Index(main.Args, "--seal-probe"); i < 0 || main.Args[i+1] != "10.96.0.1:443" || slices.Contains(main.Args, "--seal-dns") ||
		slices.Contains(main.Args, "--resolver") || s.DNSPolicy != "" {
		t.Errorf("seal args %v, dnsPolicy %q", main.Args, s.DNSPolicy)
	}
	if main.ReadinessProbe.InitialDelaySeconds != 0 || main.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v: readiness is the runner's proof, not a delay", main.ReadinessProbe)
	}
	if s.InitContainers[0].Image != "sandbox:dev" || s.InitContainers[0].Command[1] != ToolSandboxBinary {
		t.Errorf("init container %+v", s.InitContainers[0])
	}
	if p.Labels[LabelKind] != KindTool || p.Labels[LabelEgress] != EgressDNS || !ToolSelector("serve-0").Matches(labelsOf(p)) ||
		RunnerSelector().Matches(labelsOf(p)) {
		t.Errorf("labels %v", p.Labels)
	}
	o.Internet = true
	if ToolPod(o, "x", MinUID).Labels[LabelEgress] != EgressInternet {
		t.Error("internet label missing")
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "u" {
		t.Errorf("owner references %v", p.OwnerReferences)
	}
}

func labelsOf(p *corev1.Pod) labels.Set { return labels.Set(p.Labels) }

func TestToolWaiting(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}}}
	if got := ToolWaiting(p); got != "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu." {
		t.Errorf("ToolWaiting = %q", got)
	}
	p = &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: RunnerContainer, Image: "agent:x",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}}}
	if got := ToolWaiting(p); got != "ErrImagePull: not found (container runner, image agent:x)" {
		t.Errorf("ToolWaiting = %q", got)
	}
}

// A tool pod with names (the gateway's) or with none has no DNS: its
// resolv.conf names its runner's resolver, which it binds, and its seal
// proves the cluster DNS cut. A gateway pod's clients go to the gateway.
func TestToolPodEgress(t *testing.T) {
	o := ToolPodOptions{Namespace: "sandbox", SandboxImage: "sandbox:dev", Image: "agent:1", Owner: Owner{Name: "serve-0"},
		Seal: SealOptions{Probes: []string{"10.96.0.1:443"}, DNS: []string{"10.96.0.10:53"}}, RequestID: "req-1"}
	for _, tt := range []struct {
		egress string
		proxy  bool
	}{{EgressNone, false}, {EgressGateway, true}} {
		t.Run(tt.egress, func(t *testing.T) {
			o := o
			o.Egress, o.EgressAllow, o.Proxy = tt.egress, "api.example.com", "http://10.96.7.7:3128"
			p := ToolPod(o, "sandbox-tool-abcde", MinUID)
			main := p.Spec.Containers[0]
			if p.Labels[LabelEgress] != tt.egress || p.Annotations[AnnotationRequestID] != "req-1" {
				t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
			}
			if i := slices.Index(main.Args, "--resolver"); i < 0 || main.Args[i+1] != seal.ResolverAddr {
				t.Errorf("args %v: want the in-pod resolver", main.Args)
			}
			if i := slices.Index(main.Args, "--seal-dns"); i < 0 || main.Args[i+1] != "10.96.0.10:53" {
				t.Errorf("args %v: want the cluster DNS proven cut", main.Args)
			}
			if p.Spec.DNSPolicy != corev1.DNSNone || p.Spec.DNSConfig == nil || !slices.Equal(p.Spec.DNSConfig.Nameservers, []string{"127.0.0.1"}) {
				t.Errorf("dns %q %+v: want the pod's own resolver only", p.Spec.DNSPolicy, p.Spec.DNSConfig)
			}
			if !slices.ContainsFunc(p.Spec.SecurityContext.Sysctls, func(s corev1.Sysctl) bool { return s.Name == seal.UnprivilegedPortSysctl }) {
				t.Errorf("sysctls %v: the runner cannot bind port 53", p.Spec.SecurityContext.Sysctls)
			}
			env := map[string]string{}
			for _, e := range main.Env {
				env[e.Name] = e.Value
			}
			_, hasNoProxy := env["NO_PROXY"]
			if got := env["HTTPS_PROXY"] == o.Proxy && env["http_proxy"] == o.Proxy && hasNoProxy && env["NO_PROXY"] == ""; got != tt.proxy {
				t.Errorf("env %v: proxy set %v, want %v", env, got, tt.proxy)
			}
			if _, ok := p.Annotations[AnnotationEgressAllow]; ok != tt.proxy || tt.proxy && p.Annotations[AnnotationEgressAllow] != "api.example.com" {
				t.Errorf("annotations %v", p.Annotations)
			}
		})
	}
}

// The egress weakenings: a gateway pod that also gets the internet policy's
// label, or that keeps the cluster DNS.
func TestToolPodEgressWeakened(t *testing.T) {
	o := ToolPodOptions{Namespace: "sandbox", SandboxImage: "sandbox:dev", Image: "agent:1", Owner: Owner{Name: "serve-0"},
		Egress: EgressGateway, Proxy: "http://10.96.7.7:3128", EgressAllow: "a.example"}
	p := ToolPod(o, "p", MinUID)
	if p.Labels[LabelEgress] != EgressGateway || p.Labels[LabelDNS] != DNSSealed {
		t.Fatalf("unweakened labels %v", p.Labels)
	}
	o.Weaken, _ = weaken.Parse([]string{string(weaken.EgressDirect)}, false)
	if p := ToolPod(o, "p", MinUID); p.Labels[LabelEgress] != EgressInternet {
		t.Errorf("egress-direct: labels %v", p.Labels)
	}
	o.Weaken, _ = weaken.Parse([]string{string(weaken.EgressClusterDNS)}, false)
	p = ToolPod(o, "p", MinUID)
	if p.Labels[LabelDNS] != DNSCluster || p.Spec.DNSPolicy == corev1.DNSNone || slices.Contains(p.Spec.Containers[0].Args, "--resolver") {
		t.Errorf("egress-cluster-dns: labels %v dns %q args %v", p.Labels, p.Spec.DNSPolicy, p.Spec.Containers[0].Args)
	}
}
