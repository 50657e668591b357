package kube

import (
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// Tool-call pods: one per POST /v1/call, from the agent's own image.
const (
	// KindTool marks tool-call pods (LabelKind); their NetworkPolicies
	// select on it.
	KindTool = "tool"
	// LabelEgress says which egress a tool pod gets: EgressInternet (the
	// internet, never private ranges), EgressDNS (cluster DNS only),
	// EgressNone (nothing, its DNS answered in the pod) or EgressGateway
	// (the egress gateway only, its DNS answered in the pod). The
	// manifests' tool policies select on it.
	LabelEgress    = "sandbox.dev/egress"
	EgressInternet = "internet"
	EgressDNS      = "dns"
	EgressNone     = "none"
	EgressGateway  = "gateway"

	// AnnotationEgressAllow holds a gateway pod's allow list (the syntax of
	// package egress), which the gateway judges its connections by; serve
	// writes it at creation and nothing changes it after.
	AnnotationEgressAllow = "sandbox.dev/egress-allow"
	// AnnotationRequestID is the id of the call (POST /v1/call) the pod was
	// made for, which the gateway's log lines carry.
	AnnotationRequestID = "sandbox.dev/request-id"

	// ToolCPU and ToolMemory are the tool pod's hard limits (and requests):
	// more than a snippet's, since tools parse real responses.
	ToolCPU    = "2"
	ToolMemory = "1Gi"
	// ToolScratchSize bounds /tmp, memory-backed like the snippet's
	// scratch, so it counts against ToolMemory and cannot fill the node.
	ToolScratchSize = "128Mi"
	// ToolBinSize bounds the volume the sandbox binary is copied into.
	ToolBinSize = "256Mi"
	// ToolBinDir is where the init container puts the sandbox binary in
	// the agent's image; nothing of the image lives there.
	ToolBinDir = "/.sandbox"
	// ToolSandboxBinary is the binary's path in the sandbox image.
	ToolSandboxBinary = "/usr/local/bin/sandbox"
	// ToolInitContainer copies the binary; RunnerContainer runs the call.
	ToolInitContainer = "install-runner"

	// ToolReadyTimeout is how long a call waits for its pod to be Ready:
	// scheduling and pulling an agent image that is not on the node yet.
	ToolReadyTimeout = 110 * time.Second
)

// ToolPodOptions is what varies between tool pods.
type ToolPodOptions struct {
	Namespace string
	// SandboxImage holds the static sandbox binary the init container
	// copies; Image is the agent's image, used as it is.
	SandboxImage string
	Image        string
	RuntimeClass string
	RunnerPort   int32 // 0 means DefaultRunnerPort
	Owner        Owner
	// Python is the interpreter in the agent's image ("" : python3 on its PATH).
	Python string
	// Internet gives the pod the internet egress label, when Egress is "".
	Internet bool
	// Egress is the pod's egress (LabelEgress's values); "" is EgressInternet
	// or EgressDNS as Internet says.
	Egress string
	// EgressAllow is an EgressGateway pod's allow list (AnnotationEgressAllow).
	EgressAllow string
	// Proxy is the gateway's URL (http://IP:port) an EgressGateway pod's
	// proxy variables name: an address, since the pod resolves no name.
	Proxy string
	// RequestID names the call in the pod's annotations.
	RequestID string
	// MaxTimeout is the longest call the runner takes.
	MaxTimeout time.Duration
	// ActiveDeadline is the kubelet's backstop: the pod is killed this long
	// after it started, whatever happens to serve.
	ActiveDeadline time.Duration
	// CPURequest, when set, lowers the CPU request of the pod's containers
	// below their 2-CPU limit (serve's --pod-cpu-request, as for snippet
	// pods): a 2-CPU request never schedules on a 2-CPU node that also runs
	// the control plane.
	CPURequest string
	// Seal is what the runner proves cut before it is Ready: the API
	// server's Service (in 10/8, which every tool pod policy excepts). A tool
	// pod keeps the cluster DNS, which its internet egress needs, so its
	// Seal.DNS is not used.
	Seal SealOptions
	// Weaken weakens the pod on purpose (see package weaken); the zero Set
	// in every real deployment. Runner weakenings are handed to the pod's
	// runner as for snippet pods.
	Weaken weaken.Set
}

// ToolSelector selects the tool pods of one owner ("" : of every owner).
func ToolSelector(owner string) labels.Selector {
	set := labels.Set{LabelName: RunnerName, LabelKind: KindTool}
	if owner != "" {
		set[LabelOwner] = LabelValue(owner)
	}
	return labels.SelectorFromSet(set)
}

// ToolPod builds a tool-call pod named name running as uid. It has the
// snippet pod's hardening (Pod Security "restricted", random non-root uid,
// no token, no service links, read-only root) and the agent's image as it
// is: its ENTRYPOINT is replaced by the runner, which an init container from
// the sandbox image copies into a shared volume; its WORKDIR and ENV stay.
func ToolPod(o ToolPodOptions, name string, uid int64) *corev1.Pod {
	port := o.RunnerPort
	if port == 0 {
		port = DefaultRunnerPort
	}
	id := newIdentity(uid, o.Weaken.Has(weaken.ToolRootToken))
	no := false
	deadline := int64(o.ActiveDeadline / time.Second)
	grace := int64(0)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(ToolCPU),
		corev1.ResourceMemory: resource.MustParse(ToolMemory),
	}
	egress := o.Egress
	if egress == "" {
		egress = EgressDNS
		if o.Internet {
			egress = EgressInternet
		}
	}
	// A pod with no egress or with the gateway's has no DNS either: its
	// runner answers every lookup in the pod (see seal.Resolver), and
	// proves the cluster DNS cut with the rest of its seal. LabelDNS says
	// which: the manifests' sandbox-tool-dns policy opens the cluster DNS
	// to the others.
	sealedDNS := (egress == EgressNone || egress == EgressGateway) && !o.Weaken.Has(weaken.EgressClusterDNS)
	dnsMode := DNSCluster
	if sealedDNS {
		dnsMode = DNSSealed
	}
	label := egress
	if egress == EgressGateway && o.Weaken.Has(weaken.EgressDirect) {
		label = EgressInternet
	}
	bin := ToolBinDir + "/sandbox"
	args := []string{"run", "--call", "--listen", ":" + strconv.Itoa(int(port)),
		"--max-timeout", (o.MaxTimeout).String()}
	if o.Python != "" {
		args = append(args, "--python", o.Python)
	}
	args = append(args, o.Seal.args(sealedDNS)...)
	if sealedDNS {
		args = append(args, "--resolver", seal.ResolverAddr)
	}
	for _, n := range o.Weaken.Names(true) {
		args = append(args, "--weaken", n)
	}
	tmp := resource.MustParse(ToolScratchSize)
	binSize := resource.MustParse(ToolBinSize)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: o.Namespace,
			Labels: map[string]string{
				LabelName:   RunnerName,
				LabelKind:   KindTool,
				LabelOwner:  LabelValue(o.Owner.Name),
				LabelEgress: label,
				LabelDNS:    dnsMode,
			},
			Annotations: map[string]string{},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			Tolerations:                   lostNodeTolerations(),
			AutomountServiceAccountToken:  &id.mountToken,
			EnableServiceLinks:            &no,
			SecurityContext:               id.pod(),
			InitContainers: []corev1.Container{{
				Name:  ToolInitContainer,
				Image: o.SandboxImage,
				// cp rather than the binary copying itself: the sandbox
				// image is Debian, and this keeps the runner's flags the
				// only way into it.
				Command:                  []string{"cp", ToolSandboxBinary, bin},
				ImagePullPolicy:          corev1.PullIfNotPresent,
				Resources:                corev1.ResourceRequirements{Requests: requests(res, o.CPURequest), Limits: res},
				SecurityContext:          id.container(),
				VolumeMounts:             []corev1.VolumeMount{{Name: "runner", MountPath: ToolBinDir}},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Containers: []corev1.Container{{
				Name:  RunnerContainer,
				Image: o.Image,
				// Command replaces the image's ENTRYPOINT and CMD; WorkingDir
				// and Env are left alone, so the image's WORKDIR and ENV hold.
				Command: []string{bin},
				Args:    args,
				Ports:   []corev1.ContainerPort{{Name: RunnerPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
				// The call is sent only once the pod is Ready.
				ReadinessProbe:  runnerReadiness(),
				Resources:       corev1.ResourceRequirements{Requests: requests(res, o.CPURequest), Limits: res},
				SecurityContext: id.container(),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "runner", MountPath: ToolBinDir, ReadOnly: true},
					{Name: "tmp", MountPath: "/tmp"},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{
				{Name: "runner", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &binSize}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &tmp}}},
			},
		},
	}
	if o.RequestID != "" {
		pod.Annotations[AnnotationRequestID] = o.RequestID
	}
	if sealedDNS {
		host, _, _ := net.SplitHostPort(seal.ResolverAddr)
		pod.Spec.DNSPolicy = corev1.DNSNone
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{host}}
		pod.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: seal.UnprivilegedPortSysctl, Value: seal.UnprivilegedPortStart}}
	}
	if egress == EgressGateway {
		pod.Annotations[AnnotationEgressAllow] = o.EgressAllow
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, ProxyEnv(o.Proxy)...)
	}
	closeICMP(pod, o.Weaken)
	return placed(pod, o.RuntimeClass, o.Owner)
}

// ProxyEnv points the HTTP clients of a gateway pod (Python's urllib,
// requests and httpx, curl, Go's) at the gateway: both cases of each name,
// since some read one and some the other, and NO_PROXY empty so that the
// image's own cannot send a name around it (it would find no route).
func ProxyEnv(proxy string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, n := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
		out = append(out, corev1.EnvVar{Name: n, Value: proxy})
	}
	return append(out, corev1.EnvVar{Name: "NO_PROXY", Value: ""}, corev1.EnvVar{Name: "no_proxy", Value: ""})
}

// ToolPodName returns a fresh tool pod name: "sandbox-tool-" and five
// characters of PodName's alphabet.
func ToolPodName() string {
	return "sandbox-tool-" + PodName()[len("sandbox-"):]
}

// ToolNotReady is in the error of serve's 504 for a tool pod that was not
// Ready in its time: nothing of the call ran, and verify, which asks again
// then, recognises the answer by it.
const ToolNotReady = "was not Ready within"

// ToolWaiting describes what a tool pod that is not Ready is waiting for,
// init container included: "ImagePullBackOff: Back-off pulling image ...",
// "Unschedulable: 0/1 nodes are available ...".
func ToolWaiting(pod *corev1.Pod) string {
	if msg := Unschedulable(pod); msg != "" {
		return "Unschedulable: " + msg
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
				return w.Reason + colon(w.Message) + " (container " + cs.Name + ", image " + cs.Image + ")"
			}
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				return "container " + cs.Name + " exited with code " + strconv.Itoa(int(t.ExitCode)) + paren(t.Reason) + colon(t.Message)
			}
		}
	}
	if pod.Status.PodIP == "" && pod.Spec.NodeName == "" {
		return "scheduling"
	}
	return WaitingReason(pod)
}
