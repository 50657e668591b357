package netsec

import (
	_ "embed"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

//go:embed canary.py
var canaryScript string

// Ports of the canary. 8080 and 53 keep the canary on the ports a careless
// policy would open (53 to anywhere is the classic DNS hole); the Service
// maps 80 to 8080 so that Service and pod addresses differ in port too.
const (
	CanaryHTTPPort    = 8080
	CanaryServicePort = 80
	CanaryDNSPort     = 53
	// CanaryDNSAnswer is the A record the canary gives for any name, from
	// TEST-NET-1, so a reply shows which resolver answered.
	CanaryDNSAnswer = "192.0.2.53"
)

// Labels of the pods verify deploys in its own namespace.
const (
	LabelApp    = "app.kubernetes.io/name"
	AppName     = "sandbox-verify"
	LabelRole   = "sandbox.dev/verify-role"
	RoleCanary  = "canary"
	RoleControl = "control"
)

// hardened is the security context of verify's own pods: they satisfy Pod
// Security "restricted" like the sandbox, so the control differs from the
// sandbox only in the namespace (and so in the NetworkPolicies) it runs in.
func hardened() (*corev1.PodSecurityContext, *corev1.SecurityContext) {
	pod := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To(int64(65532)),
		RunAsGroup:     ptr.To(int64(65532)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	ctr := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return pod, ctr
}

func basePod(ns, name, role, image string, command []string) *corev1.Pod {
	podSC, ctrSC := hardened()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{LabelApp: AppName, LabelRole: role},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			// A backstop: verify deletes its namespace, but a killed verify
			// must not leave pods running forever.
			ActiveDeadlineSeconds: ptr.To(int64(3600)),
			SecurityContext:       podSC,
			Containers: []corev1.Container{{
				Name:            role,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         command,
				SecurityContext: ctrSC,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("10m"),
						corev1.ResourceMemory: resource.MustParse("32Mi"),
					},
					Limits: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("500m"),
						corev1.ResourceMemory: resource.MustParse("128Mi"),
					},
				},
			}},
		},
	}
}

// CanaryPod answers HTTP with token on CanaryHTTPPort and DNS on
// CanaryDNSPort. It binds port 53 as uid 65532 through the "safe" sysctl
// net.ipv4.ip_unprivileged_port_start rather than a capability.
func CanaryPod(ns, image, token string) *corev1.Pod {
	p := basePod(ns, "canary", RoleCanary, image, []string{"python3", "-u", "-c", canaryScript})
	p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
	c := &p.Spec.Containers[0]
	c.Env = []corev1.EnvVar{
		{Name: "CANARY_TOKEN", Value: token},
		{Name: "CANARY_HTTP_PORT", Value: strconv.Itoa(CanaryHTTPPort)},
		{Name: "CANARY_DNS_PORT", Value: strconv.Itoa(CanaryDNSPort)},
		{Name: "CANARY_DNS_ANSWER", Value: CanaryDNSAnswer},
	}
	c.Ports = []corev1.ContainerPort{
		{Name: "http", ContainerPort: CanaryHTTPPort, Protocol: corev1.ProtocolTCP},
		{Name: "dns-udp", ContainerPort: CanaryDNSPort, Protocol: corev1.ProtocolUDP},
		{Name: "dns-tcp", ContainerPort: CanaryDNSPort, Protocol: corev1.ProtocolTCP},
	}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(CanaryHTTPPort)}},
		PeriodSeconds: 1,
	}
	return p
}

// CanaryService puts a ClusterIP in front of the canary, for the probes of
// Service addresses (engines differ in whether ipBlock is matched before or
// after the Service address is rewritten).
func CanaryService(ns string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns, Labels: map[string]string{LabelApp: AppName}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{LabelApp: AppName, LabelRole: RoleCanary},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: CanaryServicePort, TargetPort: intstr.FromInt32(CanaryHTTPPort), Protocol: corev1.ProtocolTCP},
				{Name: "dns-udp", Port: CanaryDNSPort, TargetPort: intstr.FromInt32(CanaryDNSPort), Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: CanaryDNSPort, TargetPort: intstr.FromInt32(CanaryDNSPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// ControlPod is the unrestricted control: it sleeps, and verify runs the
// same probe script in it with pods/exec (python3 -, script on stdin).
func ControlPod(ns, image string) *corev1.Pod {
	return basePod(ns, "control", RoleControl, image,
		[]string{"python3", "-c", "import time\nwhile True: time.sleep(3600)"})
}
