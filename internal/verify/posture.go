package verify

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

const psaEnforce = "pod-security.kubernetes.io/enforce"

// checkPSA is posture/pod-security-restricted. The non-compliant pod breaks only rules of the
// restricted level (no securityContext at all is fine for baseline), so a
// namespace that enforces only baseline lets it through and the check fails.
// A compliant pod, dry-run too, is the control: the API server accepts pods
// in the namespace, so the rejection is about the posture.
func checkPSA(ctx context.Context, e *env) []Result {
	const name = "posture/pod-security-restricted"
	ns, err := e.cs.CoreV1().Namespaces().Get(ctx, e.opts.Namespace, metav1.GetOptions{})
	if err != nil {
		return []Result{result(name, "3", Fail, "get namespace: %v", err)}
	}
	bad := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "verify-psa-noncompliant-", Namespace: e.opts.Namespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: e.image}}},
	}
	good := netsec.ControlPod(e.opts.Namespace, e.image)
	good.Name, good.GenerateName = "", "verify-psa-compliant-"
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, badErr := e.cs.CoreV1().Pods(e.opts.Namespace).Create(ctx, bad, dry)
	_, goodErr := e.cs.CoreV1().Pods(e.opts.Namespace).Create(ctx, good, dry)
	return []Result{judgePSA(ns.Labels[psaEnforce], badErr, goodErr)}
}

func judgePSA(level string, badErr, goodErr error) Result {
	const name = "posture/pod-security-restricted"
	ev := fmt.Sprintf("label %s=%q", psaEnforce, level)
	switch {
	case badErr == nil:
		return result(name, "3", Fail, "%s; a pod with no securityContext (root allowed, capabilities kept, no seccomp) was admitted by a server-side dry run", ev)
	case !apierrors.IsForbidden(badErr) || !strings.Contains(badErr.Error(), "PodSecurity"):
		return result(name, "3", Inconclusive, "%s; the non-compliant pod was refused, but not by Pod Security: %v", ev, badErr)
	case goodErr != nil:
		return result(name, "3", Inconclusive, "%s; the non-compliant pod was refused by Pod Security, but a compliant pod was refused too (%v), so the refusal may not be about posture", ev, goodErr)
	case level != "restricted":
		return result(name, "3", Fail, "%s; a non-compliant pod was refused (%s), but the namespace does not enforce \"restricted\"", ev, clip(badErr.Error(), 200))
	}
	return result(name, "3", Pass, "%s; non-compliant pod refused by dry run: %s; a compliant pod admitted", ev, clip(badErr.Error(), 300))
}

// warmPodWait is how long checkPodSpec waits for the pool to have a Ready pod.
const warmPodWait = 60 * time.Second

// The three judgements of a live snippet pod's spec.
const (
	podSpecContainer = "posture/pod-spec-container"
	podSpecIsolation = "posture/pod-spec-isolation"
	podSpecResources = "posture/pod-spec-resources"
)

// checkPodSpec is the posture/pod-spec-* checks, read from a live warm pod,
// not the template.
func checkPodSpec(ctx context.Context, e *env) []Result {
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, warmPodWait, true, func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: snippetSelector})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				pod = &pods.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil || pod == nil {
		st := Inconclusive
		return []Result{
			result(podSpecContainer, "4", st, "no Ready snippet pod (%s) in %s within %s", snippetSelector, e.opts.Namespace, warmPodWait),
			result(podSpecIsolation, "4", st, "no Ready snippet pod to read"),
			result(podSpecResources, "4", st, "no Ready snippet pod to read"),
		}
	}
	e.target["runtime_class"] = deref(pod.Spec.RuntimeClassName)
	e.target["node"] = pod.Spec.NodeName
	return []Result{
		judgePodContainers(pod),
		judgePodIsolation(pod),
		judgePodResources(pod, e.opts.MemoryLimit, e.opts.RuntimeClass),
	}
}

// fields collects what a judgement of a pod looked at: each result lists
// every field, good and bad.
type fields struct{ bad, good []string }

func (f *fields) check(ok bool, what string) {
	if ok {
		f.good = append(f.good, what)
	} else {
		f.bad = append(f.bad, what)
	}
}

// judge is the result: a FAIL naming the bad fields, if there are any.
func (f *fields) judge(name, pod string) Result {
	if len(f.bad) > 0 {
		return result(name, "4", Fail, "pod %s: %s (fine: %s)", pod, strings.Join(f.bad, ", "), strings.Join(f.good, ", "))
	}
	return result(name, "4", Pass, "pod %s: %s", pod, strings.Join(f.good, ", "))
}

// judgePodContainers is posture/pod-spec-container: every container (init
// and ephemeral ones too) runs as non-root, without privilege escalation
// or capabilities, under seccomp, on a read-only root, with no host port.
func judgePodContainers(pod *corev1.Pod) Result {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	var f fields
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, ec := range pod.Spec.EphemeralContainers {
		all = append(all, corev1.Container(ec.EphemeralContainerCommon))
	}
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		check := func(ok bool, what string) { f.check(ok, c.Name+": "+what) }
		nonRoot := firstBool(sc.RunAsNonRoot, psc.RunAsNonRoot)
		check(nonRoot != nil && *nonRoot, fmt.Sprintf("runAsNonRoot=%s", showBool(nonRoot)))
		uid := firstInt(sc.RunAsUser, psc.RunAsUser)
		switch {
		case uid == nil:
			check(nonRoot != nil && *nonRoot, "runAsUser unset (image user; runAsNonRoot decides)")
		default:
			check(*uid != 0, fmt.Sprintf("runAsUser=%d", *uid))
		}
		check(sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "allowPrivilegeEscalation="+showBool(sc.AllowPrivilegeEscalation))
		check(sc.Privileged == nil || !*sc.Privileged, "privileged="+showBool(sc.Privileged))
		var drop, add []string
		if sc.Capabilities != nil {
			for _, d := range sc.Capabilities.Drop {
				drop = append(drop, string(d))
			}
			for _, a := range sc.Capabilities.Add {
				add = append(add, string(a))
			}
		}
		check(contains(drop, "ALL"), fmt.Sprintf("capabilities.drop=%v", drop))
		check(len(add) == 0, fmt.Sprintf("capabilities.add=%v", add))
		sp := sc.SeccompProfile
		if sp == nil {
			sp = psc.SeccompProfile
		}
		spType := "unset"
		if sp != nil {
			spType = string(sp.Type)
		}
		check(spType == string(corev1.SeccompProfileTypeRuntimeDefault) || spType == string(corev1.SeccompProfileTypeLocalhost), "seccompProfile="+spType)
		check(sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "readOnlyRootFilesystem="+showBool(sc.ReadOnlyRootFilesystem))
		check(len(c.Ports) == 0 || noHostPorts(c.Ports), "no hostPort")
	}
	return f.judge(podSpecContainer, pod.Name)
}

// judgePodIsolation is posture/pod-spec-isolation: no service-account
// token, no service links, none of the host's namespaces, no hostPath,
// token or secret volume.
func judgePodIsolation(pod *corev1.Pod) Result {
	var f fields
	f.check(pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken, "automountServiceAccountToken="+showBool(pod.Spec.AutomountServiceAccountToken))
	f.check(pod.Spec.EnableServiceLinks != nil && !*pod.Spec.EnableServiceLinks, "enableServiceLinks="+showBool(pod.Spec.EnableServiceLinks))
	f.check(!pod.Spec.HostNetwork, fmt.Sprintf("hostNetwork=%v", pod.Spec.HostNetwork))
	f.check(!pod.Spec.HostPID, fmt.Sprintf("hostPID=%v", pod.Spec.HostPID))
	f.check(!pod.Spec.HostIPC, fmt.Sprintf("hostIPC=%v", pod.Spec.HostIPC))
	f.good = append(f.good, "hostUsers="+showBool(pod.Spec.HostUsers)) // a user namespace would help; not required
	var hostPaths, tokenVols []string
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths = append(hostPaths, v.Name+"="+v.HostPath.Path)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					tokenVols = append(tokenVols, v.Name)
				}
			}
		}
		if v.Secret != nil {
			tokenVols = append(tokenVols, v.Name+" (secret "+v.Secret.SecretName+")")
		}
	}
	f.check(len(hostPaths) == 0, fmt.Sprintf("hostPath volumes=%v", hostPaths))
	f.check(len(tokenVols) == 0, fmt.Sprintf("token/secret volumes=%v", tokenVols))
	return f.judge(podSpecIsolation, pod.Name)
}

// judgePodResources is posture/pod-spec-resources: every container has
// the configured memory limit and a CPU limit, and the pod runs under the
// configured runtime class, if one is.
func judgePodResources(pod *corev1.Pod, memLimit, runtimeClass string) Result {
	var f fields
	want := resource.MustParse(memLimit)
	for _, c := range pod.Spec.Containers {
		got, ok := c.Resources.Limits[corev1.ResourceMemory]
		f.check(ok && got.Cmp(want) == 0, fmt.Sprintf("%s: limits.memory=%s (want %s)", c.Name, qty(got, ok), memLimit))
		cpu, ok := c.Resources.Limits[corev1.ResourceCPU]
		f.check(ok, fmt.Sprintf("%s: limits.cpu=%s", c.Name, qty(cpu, ok)))
	}
	rc := deref(pod.Spec.RuntimeClassName)
	if runtimeClass != "" {
		f.check(rc == runtimeClass, fmt.Sprintf("runtimeClassName=%q (want %q)", rc, runtimeClass))
	} else {
		f.good = append(f.good, fmt.Sprintf("runtimeClassName=%q (none configured)", rc))
	}
	return f.judge(podSpecResources, pod.Name)
}

func qty(q resource.Quantity, ok bool) string {
	if !ok {
		return "unset"
	}
	return q.String()
}

func noHostPorts(ps []corev1.ContainerPort) bool {
	for _, p := range ps {
		if p.HostPort != 0 {
			return false
		}
	}
	return true
}

func firstBool(ps ...*bool) *bool {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func firstInt(ps ...*int64) *int64 {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func showBool(p *bool) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
