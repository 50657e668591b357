package kube

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// Limits of a snippet pod. CPU and memory are the limits docs/api.md
// promises (1 CPU, 512 MiB, requests equal to limits so the pod is
// Guaranteed and is the last to be evicted).
const (
	SnippetCPU    = "1"
	SnippetMemory = "512Mi"

	// ScratchSize bounds each of /work and /tmp. Both are memory-backed, so
	// the size is a hard tmpfs limit (ENOSPC, not a late eviction) and what
	// they hold counts against the pod's 512Mi: a snippet cannot fill the
	// node's disk.
	ScratchSize = "64Mi"

	// ActiveDeadlineSeconds is the backstop against leaks: the kubelet kills
	// a pod an hour after it started, whatever happens to the service, the
	// garbage collector or the janitor. An hour is far above the longest run
	// (60 s timeout) plus any wait in the warm pool that matters, and cheap:
	// an idle warm pod is simply replaced once an hour. The pool stops
	// handing out pods in their last RecycleMargin.
	ActiveDeadlineSeconds = 3600

	// LostNodeTolerationSeconds is how long a sandbox pod stays bound to a
	// node the control plane lost (its node.kubernetes.io/unreachable
	// taint, put on about 40 s after the kubelet's last heartbeat): none.
	// A pod there can neither be reached nor start; evicted (marked for
	// deletion) at once, it stops counting in its pool, which starts a
	// replacement on a node that answers, instead of waiting the default
	// 300 s. The eviction completes when the node returns or is deleted.
	// NotReady reported by a live kubelet (a runtime restart) keeps the
	// default: its pods may well survive it.
	LostNodeTolerationSeconds = 0

	// DefaultPodPidsLimit is the process limit per pod the manifests assume
	// of the cluster (the kubelet's podPidsLimit; the e2e cluster sets it):
	// room for a snippet's ordinary use of processes and threads, small
	// enough that a fork bomb stays a pod's problem.
	DefaultPodPidsLimit = 1024

	// Workdir is the snippet's working directory (an emptyDir).
	Workdir = "/work"

	// MinUID and MaxUID bound the per-pod uid/gid. Each pod gets its own, far
	// above any uid an image or the node uses, so that RLIMIT_NPROC -- which
	// the kernel counts per uid across the whole node -- limits one pod's
	// processes only and a fork bomb in one pod cannot starve another.
	MinUID = 100000
	MaxUID = 1<<31 - 2
)

// Owner identifies the serve pod whose pool creates the sandbox pods. With a
// UID the pods get an ownerReference, so the garbage collector removes them
// when that pod goes away; without one (serve running outside the cluster)
// only the owner label ties them to it.
type Owner struct {
	Name string
	UID  types.UID
	// Incarnation tells this start of the serve process from earlier ones
	// in the same pod (a container restart keeps the pod's name and UID).
	// Snippet pods carry it as LabelIncarnation when it is set.
	Incarnation string
}

// PodOptions is what varies between deployments of the sandbox pod.
type PodOptions struct {
	Namespace    string
	Image        string
	RuntimeClass string // "" keeps the cluster default (runc)
	RunnerPort   int32  // 0 means DefaultRunnerPort
	Owner        Owner
	// CPURequest, when set, lowers the pod's CPU request below its 1-CPU
	// limit. The default (requests = limits, Guaranteed QoS) reserves a
	// whole CPU per warm pod, which a small node cannot hold: on a 2-CPU kind
	// node only one sandbox pod fits beside the control plane.
	CPURequest string
	// PidsLimit is the kubelet's podPidsLimit on the nodes the pods run on
	// (0: unknown). The runner keeps the snippet's process limit below it;
	// a container cannot read its pod's limit itself.
	PidsLimit int64

	// DNS is the snippet pods' DNS: DNSSealed or DNSCluster ("" is
	// DefaultDNS).
	DNS string
	// Seal is what the pods' runner proves cut before it is Ready.
	Seal SealOptions
	// Preload are the modules the runner's python3 imports while it waits
	// (the runner's --preload); none when empty.
	Preload []string
	// PreloadAlways is the runner's --preload-always: the preload does not
	// wait for the node to have CPU to spare.
	PreloadAlways bool

	// Weaken weakens the pod on purpose (see package weaken); the zero Set
	// in every real deployment. The restricted namespace refuses a
	// root-token pod anyway.
	Weaken weaken.Set
}

// The snippet pods' DNS modes (serve's --snippet-dns).
const (
	// DNSSealed: the pod's resolv.conf names its own runner
	// (seal.ResolverAddr), which answers every name NXDOMAIN at once and
	// forwards nothing, and the pod's NetworkPolicy allows no egress at all:
	// no query leaves the pod, so DNS carries nothing out.
	DNSSealed = "sealed"
	// DNSCluster: lookups go to the cluster DNS, which forwards names
	// outside the cluster upstream; the pods carry LabelDNS=cluster, which
	// the manifests' sandbox-runner-dns policy opens port 53 to the cluster
	// DNS for. Data can leave encoded in query names.
	DNSCluster = "cluster"
	// DefaultDNS is sealed: a snippet has no use for names it could not
	// connect to anyway, and an open resolver is a channel out.
	DefaultDNS = DNSSealed
	// LabelDNS carries the pod's DNS mode.
	LabelDNS = "sandbox.dev/dns"
)

// DNSModes lists the modes, for flags and errors.
var DNSModes = []string{DNSSealed, DNSCluster}

// ValidateDNS checks a DNS mode ("" is the default).
func ValidateDNS(mode string) error {
	switch mode {
	case "", DNSSealed, DNSCluster:
		return nil
	}
	return fmt.Errorf("snippet DNS %q: want %s or %s", mode, DNSSealed, DNSCluster)
}

// SealOptions are the addresses a sandbox pod's runner must find cut before
// it is Ready (see package seal): serve knows them from its own pod.
type SealOptions struct {
	// Probes are TCP addresses (host:port): the API server's Service, which
	// every pod reaches unless a NetworkPolicy stops it.
	Probes []string
	// DNS are the cluster DNS resolvers (host:port), asked DNSName: a
	// sealed pod must get no answer from them. Cluster-mode pods ignore it.
	DNS     []string
	DNSName string
}

// args are the runner flags for o; dns adds the DNS proof.
func (o SealOptions) args(dns bool) []string {
	var a []string
	if len(o.Probes) > 0 {
		a = append(a, "--seal-probe", strings.Join(o.Probes, ","))
	}
	if dns && len(o.DNS) > 0 {
		a = append(a, "--seal-dns", strings.Join(o.DNS, ","))
		if o.DNSName != "" {
			a = append(a, "--seal-dns-name", o.DNSName)
		}
	}
	return a
}

// ValidateCPURequest checks a CPURequest: a quantity above zero and not
// above the limit.
func ValidateCPURequest(q string) error {
	if q == "" {
		return nil
	}
	v, err := resource.ParseQuantity(q)
	if err != nil {
		return fmt.Errorf("cpu request %q: %w", q, err)
	}
	if v.Sign() <= 0 || v.Cmp(resource.MustParse(SnippetCPU)) > 0 {
		return fmt.Errorf("cpu request %q: must be above 0 and at most the %s CPU limit", q, SnippetCPU)
	}
	return nil
}

// RandomUID returns a uid in [MinUID, MaxUID] from a secure source, so that
// pods cannot predict (and collide with) one another's uid.
func RandomUID() int64 {
	n, err := rand.Int(rand.Reader, big.NewInt(MaxUID-MinUID+1))
	if err != nil {
		// crypto/rand does not fail on Linux; keep a valid uid regardless.
		return MinUID
	}
	return MinUID + n.Int64()
}

// SnippetPod builds the sandbox pod named name that runs as uid (its group
// too). It meets Pod Security "restricted" (the namespace's admission
// enforces it) and the posture verify's posture/pod-spec-* checks read
// from live pods.
func SnippetPod(o PodOptions, name string, uid int64) *corev1.Pod {
	port := o.RunnerPort
	if port == 0 {
		port = DefaultRunnerPort
	}
	id := newIdentity(uid, o.Weaken.Has(weaken.RootToken))
	no := false
	dnsMode := o.DNS
	if dnsMode == "" {
		dnsMode = DefaultDNS
	}
	sealed := dnsMode == DNSSealed
	args := []string{"run", "--listen", ":" + strconv.Itoa(int(port)), "--workdir", Workdir}
	if o.PidsLimit > 0 {
		args = append(args, "--pod-pids-limit", strconv.FormatInt(o.PidsLimit, 10))
	}
	if len(o.Preload) > 0 {
		args = append(args, "--preload", strings.Join(o.Preload, ","))
		if o.PreloadAlways {
			args = append(args, "--preload-always")
		}
	}
	args = append(args, o.Seal.args(sealed)...)
	if sealed {
		args = append(args, "--resolver", seal.ResolverAddr)
	}
	if o.Weaken.Has(weaken.NeverReady) {
		args[2] = ":" + strconv.Itoa(int(port)+1)
	}
	for _, n := range o.Weaken.Names(true) {
		args = append(args, "--weaken", n)
	}
	deadline := int64(ActiveDeadlineSeconds)
	grace := int64(0)
	scratch := resource.MustParse(ScratchSize)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(SnippetCPU),
		corev1.ResourceMemory: resource.MustParse(SnippetMemory),
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: o.Namespace,
			Labels: map[string]string{
				LabelName:  RunnerName,
				LabelKind:  KindSnippet,
				LabelOwner: LabelValue(o.Owner.Name),
				LabelDNS:   dnsMode,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			Tolerations:                   lostNodeTolerations(),
			AutomountServiceAccountToken:  &id.mountToken,
			EnableServiceLinks:            &no,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			SecurityContext:               id.pod(),
			Containers: []corev1.Container{{
				Name:            RunnerContainer,
				Image:           o.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            args,
				Env: []corev1.EnvVar{
					// The uid has no passwd entry; give tools a writable home.
					{Name: "HOME", Value: Workdir},
					{Name: "TMPDIR", Value: "/tmp"},
				},
				Ports:           []corev1.ContainerPort{{Name: RunnerPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe:  runnerReadiness(),
				Resources:       corev1.ResourceRequirements{Requests: requests(res, o.CPURequest), Limits: res},
				SecurityContext: id.container(),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "work", MountPath: Workdir},
					{Name: "tmp", MountPath: "/tmp"},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{
				{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &scratch}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr(scratch.DeepCopy())}}},
			},
		},
	}
	if o.Owner.Incarnation != "" {
		pod.Labels[LabelIncarnation] = LabelValue(o.Owner.Incarnation)
	}
	if sealed {
		// The runner's resolver is the pod's only one (resolv.conf has no
		// port, hence 53), and it binds that port as non-root through the
		// pod's own safe sysctl.
		host, _, _ := net.SplitHostPort(seal.ResolverAddr)
		pod.Spec.DNSPolicy = corev1.DNSNone
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{host}}
		pod.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: seal.UnprivilegedPortSysctl, Value: seal.UnprivilegedPortStart}}
	}
	closeICMP(pod, o.Weaken)
	return placed(pod, o.RuntimeClass, o.Owner)
}

// closeICMP leaves no process of the pod able to open an ICMP socket (see
// seal.PingGroupSysctl) and has its runner prove, with the rest of its
// seal, that an echo to the pod's node goes unanswered: an address that
// answers echo wherever the path is open. The weakening AllowICMP keeps the
// runtime's range and leaves the echo out of the proof.
func closeICMP(pod *corev1.Pod, w weaken.Set) {
	if w.Has(weaken.AllowICMP) {
		return
	}
	sc := pod.Spec.SecurityContext
	sc.Sysctls = append(sc.Sysctls, corev1.Sysctl{Name: seal.PingGroupSysctl, Value: seal.PingGroupNone})
	c := &pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: seal.NodeIPEnv,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}})
	// The kubelet expands $(NAME) from the container's own variables.
	c.Args = append(c.Args, "--seal-icmp", "$("+seal.NodeIPEnv+")")
}

// identity is who a sandbox pod's processes are, and whether it gets a
// service-account token: a random non-root uid and none, unless a
// weakening asks for root with a token.
type identity struct {
	uid, gid            int64
	nonRoot, mountToken bool
}

func newIdentity(uid int64, rootToken bool) *identity {
	if rootToken {
		return &identity{uid: 0, gid: 0, nonRoot: false, mountToken: true}
	}
	return &identity{uid: uid, gid: uid, nonRoot: true, mountToken: false}
}

// pod is the pod-level security context both kinds of sandbox pod share.
func (id *identity) pod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   &id.nonRoot,
		RunAsUser:      &id.uid,
		RunAsGroup:     &id.gid,
		FSGroup:        &id.gid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// container is every sandbox container's security context: Pod Security
// "restricted" and a read-only root.
func (id *identity) container() *corev1.SecurityContext {
	no, yes := false, true
	return &corev1.SecurityContext{
		RunAsNonRoot:             &id.nonRoot,
		RunAsUser:                &id.uid,
		RunAsGroup:               &id.gid,
		Privileged:               &no,
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// placed gives pod its runtime class, when one is set, and its owner, so
// that the pod goes when the serve pod that made it does.
func placed(pod *corev1.Pod, runtimeClass string, owner Owner) *corev1.Pod {
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = &runtimeClass
	}
	if owner.UID != "" {
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1",
			Kind:       "Pod",
			Name:       owner.Name,
			UID:        owner.UID,
			// BlockOwnerDeletion would need update rights on the owner's
			// finalizers; the service's Role has none, and nothing needs it.
		}}
	}
	return pod
}

// PodName returns a fresh sandbox pod name: "sandbox-" and five characters
// from the alphabet Kubernetes uses for generateName (no vowels, so no words).
// The pool names pods itself so it can record the create before the API call
// returns (see pool's expectations).
func PodName() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			panic(fmt.Sprintf("crypto/rand: %v", err))
		}
		b[i] = alphabet[n.Int64()]
	}
	return "sandbox-" + string(b)
}

func ptr[T any](v T) *T { return &v }

// requests are the limits, with the CPU request lowered when asked (an
// invalid one, which ValidateCPURequest refuses earlier, is ignored).
func requests(limits corev1.ResourceList, cpu string) corev1.ResourceList {
	r := limits.DeepCopy()
	if q, err := resource.ParseQuantity(cpu); cpu != "" && err == nil {
		r[corev1.ResourceCPU] = q
	}
	return r
}

// runnerReadiness is the probe of a sandbox pod's runner, snippet or tool.
// The runner answers 200 only once it has proven the pod's egress cut (its
// --seal-probe targets refused or silent) and, in a snippet pod, its python3
// waits for the job, so no delay is needed: the probe
// starts at once, every second, and the runner holds each probe that comes
// before the proof up to seal.ReadyWait, so that Ready follows the proof by
// milliseconds rather than by up to a period.
func runnerReadiness() *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/readyz", Port: intstrName(RunnerPortName),
		}},
		PeriodSeconds:    1,
		TimeoutSeconds:   seal.ProbeTimeoutSeconds,
		SuccessThreshold: 1,
		FailureThreshold: 1,
	}
}

// lostNodeTolerations are a sandbox or tool pod's tolerations: of a lost
// node, for LostNodeTolerationSeconds.
func lostNodeTolerations() []corev1.Toleration {
	secs := int64(LostNodeTolerationSeconds)
	return []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}}
}
