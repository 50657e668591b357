package kube

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/internal/weaken"
)

func testPod(o PodOptions) *corev1.Pod {
	if o.Image == "" {
		o.Image = "sandbox:dev"
	}
	if o.Namespace == "" {
		o.Namespace = "sandbox"
	}
	if o.Owner.Name == "" {
		o.Owner = Owner{Name: "sandbox-7d9f-abcde", UID: "1234"}
	}
	return SnippetPod(o, PodName(), RandomUID())
}

// TestSnippetPodPosture checks the template against Pod Security
// "restricted" and the posture verify's posture/pod-spec-* checks read from
// live pods.
func TestSnippetPodPosture(t *testing.T) {
	pod := testPod(PodOptions{})
	s := pod.Spec
	fail := func(format string, args ...any) { t.Helper(); t.Errorf(format, args...) }

	if s.HostNetwork || s.HostPID || s.HostIPC || s.HostUsers != nil && *s.HostUsers {
		fail("host namespaces in use")
	}
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		fail("service account token mounted")
	}
	if s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		fail("service links enabled")
	}
	if s.RestartPolicy != corev1.RestartPolicyNever {
		fail("restartPolicy %q", s.RestartPolicy)
	}
	if s.ActiveDeadlineSeconds == nil || *s.ActiveDeadlineSeconds < 300 {
		fail("activeDeadlineSeconds %v: want a backstop well above a run", s.ActiveDeadlineSeconds)
	}
	if s.TerminationGracePeriodSeconds == nil || *s.TerminationGracePeriodSeconds > 1 {
		fail("terminationGracePeriodSeconds %v", s.TerminationGracePeriodSeconds)
	}
	if s.RuntimeClassName != nil {
		fail("runtimeClassName set without being asked")
	}
	psc := s.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser < MinUID ||
		psc.RunAsGroup == nil || *psc.RunAsGroup < MinUID || psc.FSGroup == nil || *psc.FSGroup < MinUID {
		fail("pod securityContext %+v: want non-root uid/gid/fsGroup >= %d", psc, MinUID)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		fail("pod seccomp %v", psc.SeccompProfile)
	}
	for _, g := range psc.SupplementalGroups {
		if g == 0 {
			fail("supplemental group 0")
		}
	}
	if len(s.Containers) != 1 || len(s.InitContainers) != 0 || len(s.EphemeralContainers) != 0 {
		t.Fatalf("want exactly one container")
	}
	c := s.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		fail("allowPrivilegeEscalation not false")
	case sc.Privileged != nil && *sc.Privileged:
		fail("privileged")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		fail("root filesystem writable")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		fail("container runAsNonRoot not set")
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0:
		fail("capabilities %+v: want drop ALL, add none", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		fail("container seccomp %v", sc.SeccompProfile)
	case sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount:
		fail("procMount %v", *sc.ProcMount)
	}
	if *sc.RunAsUser != *psc.RunAsUser {
		fail("container and pod uid differ")
	}
	for _, p := range c.Ports {
		if p.HostPort != 0 || p.HostIP != "" {
			fail("host port %+v", p)
		}
	}
	want := resource.MustParse(SnippetMemory)
	for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		if m := rl[corev1.ResourceMemory]; m.Cmp(want) != 0 {
			fail("memory %s, want %s", m.String(), SnippetMemory)
		}
		if cpu := rl[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("1")) != 0 {
			fail("cpu %s, want 1", cpu.String())
		}
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent || c.Image != "sandbox:dev" {
		fail("image %s pull %s", c.Image, c.ImagePullPolicy)
	}
	if got := strings.Join(c.Args, " "); got != "run --listen :8080 --workdir /work --resolver 127.0.0.1:53 --seal-icmp $(SANDBOX_NODE_IP)" {
		fail("args %q", got)
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.StrVal != RunnerPortName || rp.PeriodSeconds != 1 {
		fail("readiness probe %+v", rp)
	}
	// Readiness is the runner's proof, not a timer; it holds an early
	// probe below the probe's timeout.
	if rp.InitialDelaySeconds != 0 || time.Duration(rp.TimeoutSeconds)*time.Second <= seal.ReadyWait {
		fail("readiness probe delay %d s, timeout %d s: want no delay and a timeout above the runner's %s wait",
			rp.InitialDelaySeconds, rp.TimeoutSeconds, seal.ReadyWait)
	}
	for _, sc := range psc.Sysctls {
		if sc.Name != seal.UnprivilegedPortSysctl && sc.Name != seal.PingGroupSysctl {
			fail("sysctl %s: only the safe %s and %s are expected", sc.Name, seal.UnprivilegedPortSysctl, seal.PingGroupSysctl)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != RunnerPortName || c.Ports[0].ContainerPort != DefaultRunnerPort {
		fail("ports %+v", c.Ports)
	}

	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["work"] != "/work" || mounts["tmp"] != "/tmp" || len(mounts) != 2 {
		fail("mounts %v", mounts)
	}
	for _, v := range s.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
			fail("volume %s: want a size-limited emptyDir, got %+v", v.Name, v.VolumeSource)
		}
	}

	if pod.Labels[LabelName] != RunnerName || pod.Labels[LabelKind] != KindSnippet || pod.Labels[LabelOwner] != "sandbox-7d9f-abcde" {
		fail("labels %v", pod.Labels)
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "Pod" || pod.OwnerReferences[0].UID != "1234" {
		fail("ownerReferences %+v", pod.OwnerReferences)
	}
	if errs := validation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 || !strings.HasPrefix(pod.Name, "sandbox-") {
		fail("name %q: %v", pod.Name, errs)
	}
}

func TestSnippetPodOptions(t *testing.T) {
	pod := testPod(PodOptions{RuntimeClass: "gvisor", RunnerPort: 9000, Owner: Owner{Name: "laptop"}, PidsLimit: 512,
		Preload: []string{"numpy", "matplotlib.pyplot"}})
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName %v", pod.Spec.RuntimeClassName)
	}
	if len(pod.OwnerReferences) != 0 {
		t.Errorf("ownerReferences without an owner UID: %v", pod.OwnerReferences)
	}
	c := pod.Spec.Containers[0]
	if c.Ports[0].ContainerPort != 9000 || c.Args[2] != ":9000" {
		t.Errorf("port %d args %v", c.Ports[0].ContainerPort, c.Args)
	}
	if i := slices.Index(c.Args, "--pod-pids-limit"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "512" {
		t.Errorf("args %v: the runner is not told the pod's process limit", c.Args)
	}
	if i := slices.Index(c.Args, "--preload"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "numpy,matplotlib.pyplot" {
		t.Errorf("args %v: the runner is not told what to preload", c.Args)
	}
	if slices.Contains(c.Args, "--preload-always") {
		t.Errorf("args %v: the preload told not to yield to a busy node", c.Args)
	}
	always := testPod(PodOptions{Preload: []string{"numpy"}, PreloadAlways: true})
	if args := always.Spec.Containers[0].Args; !slices.Contains(args, "--preload-always") {
		t.Errorf("args %v: PreloadAlways not passed on", args)
	}
}

// TestSnippetPodDNS: a sealed pod resolves through its own runner only (no
// other nameserver, the runner told to answer there and allowed to bind
// port 53 as non-root) and proves the cluster DNS silent; a cluster-mode pod
// keeps the cluster DNS, carries the label its DNS policy selects, and
// proves only the API server cut.
func TestSnippetPodDNS(t *testing.T) {
	so := SealOptions{Probes: []string{"10.96.0.1:443"}, DNS: []string{"10.96.0.10:53"}, DNSName: "kubernetes.default.svc.k8s.example."}
	for _, tc := range []struct {
		mode, label string
		args        string
	}{
		{"", DNSSealed, "--seal-probe 10.96.0.1:443 --seal-dns 10.96.0.10:53 --seal-dns-name kubernetes.default.svc.k8s.example. --resolver 127.0.0.1:53 --seal-icmp $(SANDBOX_NODE_IP)"},
		{DNSSealed, DNSSealed, "--seal-probe 10.96.0.1:443 --seal-dns 10.96.0.10:53 --seal-dns-name kubernetes.default.svc.k8s.example. --resolver 127.0.0.1:53 --seal-icmp $(SANDBOX_NODE_IP)"},
		{DNSCluster, DNSCluster, "--seal-probe 10.96.0.1:443 --seal-icmp $(SANDBOX_NODE_IP)"},
	} {
		t.Run(tc.label+"/"+tc.mode, func(t *testing.T) {
			pod := testPod(PodOptions{DNS: tc.mode, Seal: so})
			s := pod.Spec
			args := strings.Join(s.Containers[0].Args, " ")
			if want := "run --listen :8080 --workdir /work " + tc.args; args != want {
				t.Errorf("args\n got %q\nwant %q", args, want)
			}
			if pod.Labels[LabelDNS] != tc.label {
				t.Errorf("label %s=%q, want %q", LabelDNS, pod.Labels[LabelDNS], tc.label)
			}
			sysctls := slices.DeleteFunc(slices.Clone(s.SecurityContext.Sysctls), func(c corev1.Sysctl) bool { return c.Name == seal.PingGroupSysctl })
			if tc.label == DNSCluster {
				if s.DNSPolicy != "" || s.DNSConfig != nil || len(sysctls) != 0 {
					t.Errorf("cluster mode: dnsPolicy %q, dnsConfig %+v, sysctls %v", s.DNSPolicy, s.DNSConfig, sysctls)
				}
				return
			}
			if s.DNSPolicy != corev1.DNSNone || s.DNSConfig == nil || !slices.Equal(s.DNSConfig.Nameservers, []string{"127.0.0.1"}) ||
				len(s.DNSConfig.Searches) != 0 {
				t.Errorf("sealed: dnsPolicy %q, dnsConfig %+v: want only the runner's 127.0.0.1", s.DNSPolicy, s.DNSConfig)
			}
			if len(sysctls) != 1 || sysctls[0].Name != "net.ipv4.ip_unprivileged_port_start" || sysctls[0].Value != "53" {
				t.Errorf("sealed: sysctls %v: want ports from 53 up bindable, below it privileged", sysctls)
			}
		})
	}
	if ValidateDNS("open") == nil || ValidateDNS("") != nil || ValidateDNS(DNSCluster) != nil {
		t.Error("ValidateDNS")
	}
}

func TestRandomUIDDiffersPerPod(t *testing.T) {
	seen := map[int64]bool{}
	for range 1000 {
		u := RandomUID()
		if u < MinUID || u > MaxUID {
			t.Fatalf("uid %d out of range", u)
		}
		seen[u] = true
	}
	if len(seen) < 990 {
		t.Fatalf("only %d distinct uids in 1000", len(seen))
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"sandbox-7d9f8-abcde", "sandbox-7d9f8-abcde"},
		{"my.host", "my.host"},
	} {
		if got := LabelValue(tc.in); got != tc.want {
			t.Errorf("LabelValue(%q) = %q", tc.in, got)
		}
	}
	for _, in := range []string{strings.Repeat("a", 70), "-x-", "a b/c", ""} {
		got := LabelValue(in)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 || got == "" {
			t.Errorf("LabelValue(%q) = %q: %v", in, got, errs)
		}
	}
	if LabelValue(strings.Repeat("a", 70)) == LabelValue(strings.Repeat("a", 71)) {
		t.Error("long values collide")
	}
}

func TestDeathOf(t *testing.T) {
	term := func(reason string, code int32) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: RunnerContainer, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}}}
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		gone   bool
		dead   bool
		oom    bool
		reason string
	}{
		{"running", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, false, false, false, ""},
		{"oom", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term("OOMKilled", 137)}}, false, true, true, "memory"},
		{"evicted", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory", ContainerStatuses: term("Error", 137)}}, false, true, false, "evicted: low on memory"},
		{"node lost", &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager", Message: "node unreachable"}}}}, false, true, false, "DeletionByTaintManager"},
		{"deadline", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded"}}, false, true, false, "DeadlineExceeded"},
		{"deleting", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false, true, false, "deleted"},
		{"gone", nil, true, true, false, "deleted"},
		{"gone with last state", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, true, true, false, "deleted"},
		{"runner crashed", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term("Error", 2)}}, false, true, false, "exited with code 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DeathOf(tc.pod, tc.gone)
			if d.Dead != tc.dead || d.OOMKilled != tc.oom || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("DeathOf = %+v, want dead=%v oom=%v reason containing %q", d, tc.dead, tc.oom, tc.reason)
			}
		})
	}
}

func TestIsReady(t *testing.T) {
	ready := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if !IsReady(ready) {
		t.Error("ready pod not ready")
	}
	noIP := ready.DeepCopy()
	noIP.Status.PodIP = ""
	notReady := ready.DeepCopy()
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	for _, p := range []*corev1.Pod{noIP, notReady, {}} {
		if IsReady(p) {
			t.Errorf("IsReady(%+v)", p.Status)
		}
	}
}

func TestSnippetPodWeakenedForVerify(t *testing.T) {
	weakened, err := weaken.Parse([]string{"root-token", "kill-leader-only", "never-ready"}, false)
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod(PodOptions{Weaken: weakened})
	sc := pod.Spec.Containers[0].SecurityContext
	if *pod.Spec.SecurityContext.RunAsUser != 0 || *sc.RunAsUser != 0 || *sc.RunAsNonRoot || !*pod.Spec.AutomountServiceAccountToken {
		t.Errorf("root-token pod: uid %d nonRoot %v token %v", *sc.RunAsUser, *sc.RunAsNonRoot, *pod.Spec.AutomountServiceAccountToken)
	}
	want := []string{"run", "--listen", ":8081", "--workdir", Workdir, "--resolver", seal.ResolverAddr, "--weaken", "kill-leader-only",
		"--seal-icmp", "$(" + seal.NodeIPEnv + ")"}
	if args := pod.Spec.Containers[0].Args; !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	// Everything else stays as hardened as ever.
	if *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("weakened more than asked: %+v", sc)
	}
}

func TestSnippetPodCPURequest(t *testing.T) {
	pod := testPod(PodOptions{CPURequest: "100m"})
	r := pod.Spec.Containers[0].Resources
	if cpu := r.Requests[corev1.ResourceCPU]; cpu.String() != "100m" {
		t.Errorf("cpu request %s", cpu.String())
	}
	if cpu := r.Limits[corev1.ResourceCPU]; cpu.String() != "1" {
		t.Errorf("cpu limit %s", cpu.String())
	}
	if m := r.Requests[corev1.ResourceMemory]; m.String() != SnippetMemory {
		t.Errorf("memory request %s", m.String())
	}
	for _, bad := range []string{"2", "0", "-1", "lots"} {
		if ValidateCPURequest(bad) == nil {
			t.Errorf("cpu request %q accepted", bad)
		}
	}
	for _, ok := range []string{"", "100m", "1", "0.5"} {
		if err := ValidateCPURequest(ok); err != nil {
			t.Errorf("cpu request %q: %v", ok, err)
		}
	}
}

func TestUnschedulable(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 Insufficient cpu.",
	}}}}
	if got := Unschedulable(pod); !strings.Contains(got, "Insufficient cpu") {
		t.Errorf("Unschedulable = %q", got)
	}
	if got := Unschedulable(&corev1.Pod{}); got != "" {
		t.Errorf("Unschedulable of a fresh pod = %q", got)
	}
}

// TestPoolSelectorTellsIncarnationsApart: a pool's selector matches the pods
// its own process made and none of an earlier start of the same serve pod,
// nor another owner's.
func TestPoolSelectorTellsIncarnationsApart(t *testing.T) {
	owner := Owner{Name: "serve-0", UID: "1234", Incarnation: "a1b2c3"}
	mine := testPod(PodOptions{Owner: owner})
	if mine.Labels[LabelIncarnation] != "a1b2c3" {
		t.Fatalf("labels %v: want the incarnation", mine.Labels)
	}
	earlier := testPod(PodOptions{Owner: Owner{Name: "serve-0", UID: "1234", Incarnation: "ffff00"}})
	other := testPod(PodOptions{Owner: Owner{Name: "serve-1", UID: "5678", Incarnation: "a1b2c3"}})
	sel := PoolSelector(owner)
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{{"own", mine, true}, {"earlier incarnation", earlier, false}, {"other owner", other, false}} {
		if got := sel.Matches(labels.Set(c.pod.Labels)); got != c.want {
			t.Errorf("%s: PoolSelector matches = %v, want %v", c.name, got, c.want)
		}
	}
	if !OwnerSelector("serve-0").Matches(labels.Set(earlier.Labels)) {
		t.Error("OwnerSelector must match every incarnation of its owner (the janitor and the e2e suite use it)")
	}
	if _, ok := testPod(PodOptions{Owner: Owner{Name: "laptop"}}).Labels[LabelIncarnation]; ok {
		t.Error("incarnation label set without an incarnation")
	}
}

// TestICMPClosed: both kinds of sandbox pod leave no process able to open
// an ICMP socket (the empty ping_group_range) and have their runner prove
// an echo to their node unanswered; the weakening AllowICMP leaves both
// out, and nothing else.
func TestICMPClosed(t *testing.T) {
	allow, err := weaken.Parse([]string{string(weaken.AllowICMP)}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pod  func(weaken.Set) *corev1.Pod
	}{
		{"snippet", func(w weaken.Set) *corev1.Pod { return testPod(PodOptions{Weaken: w}) }},
		{"tool", func(w weaken.Set) *corev1.Pod {
			return ToolPod(ToolPodOptions{Namespace: "sandbox", SandboxImage: "sandbox:dev", Image: "agent:1", Weaken: w}, "t", 123456)
		}},
	} {
		for _, open := range []bool{false, true} {
			w := weaken.Set{}
			if open {
				w = allow
			}
			pod := tc.pod(w)
			c := pod.Spec.Containers[0]
			ping := slices.Contains(pod.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: seal.PingGroupSysctl, Value: seal.PingGroupNone})
			env := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == seal.NodeIPEnv && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP"
			})
			proof := strings.HasSuffix(strings.Join(c.Args, " "), "--seal-icmp $("+seal.NodeIPEnv+")")
			if ping == open || env == open || proof == open {
				t.Errorf("%s pod, allow-icmp %v: ping_group_range closed %v, node address given %v, echo proven %v (args %q)",
					tc.name, open, ping, env, proof, c.Args)
			}
		}
	}
}

// TestLostNodeToleration: snippet and tool pods leave a node the control
// plane lost at once (unreachable, NoExecute, 0 s), so that their pools and
// calls replace them elsewhere, and take the default for a node whose
// live kubelet reports NotReady (no toleration of their own for it).
func TestLostNodeToleration(t *testing.T) {
	for name, spec := range map[string]corev1.PodSpec{
		"snippet": testPod(PodOptions{}).Spec,
		"tool": ToolPod(ToolPodOptions{Namespace: "sandbox", SandboxImage: "sandbox:dev", Image: "agent:1",
			Owner: Owner{Name: "serve-0", UID: "u"}, Python: "/usr/bin/python3", MaxTimeout: time.Minute,
			ActiveDeadline: 5 * time.Minute}, "sandbox-tool-abcde", 123456).Spec,
	} {
		var unreachable []corev1.Toleration
		for _, tl := range spec.Tolerations {
			switch tl.Key {
			case corev1.TaintNodeUnreachable:
				unreachable = append(unreachable, tl)
			case corev1.TaintNodeNotReady:
				t.Errorf("%s pod: a toleration of its own for not-ready: %+v", name, tl)
			}
		}
		if len(unreachable) != 1 || unreachable[0].Effect != corev1.TaintEffectNoExecute ||
			unreachable[0].TolerationSeconds == nil || *unreachable[0].TolerationSeconds != LostNodeTolerationSeconds {
			t.Errorf("%s pod: unreachable tolerations %+v, want one NoExecute for %d s", name, unreachable, LostNodeTolerationSeconds)
		}
	}
}
