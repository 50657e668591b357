package pool

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxd/sandbox/internal/kube"
)

// janitor runs once, before the first claim, and deletes the sandbox pods
// nobody will ever use:
//   - pods of this owner made by an earlier start of this process (its
//     container restarted: same pod, same UID, another incarnation). Its
//     claims lived in its memory, and the record of a claim is written only
//     after the job reached the pod, so none of its pods can be trusted to
//     be unused: all go;
//   - pods whose owner pod is gone or was replaced (same name, other UID).
//
// The garbage collector removes the second kind too, but asynchronously;
// the janitor makes a restart start clean. Pods without an ownerReference
// (a serve outside the cluster, where a second process on the same host
// cannot be told from an earlier one) cannot be judged and are left to
// their activeDeadlineSeconds; the pool never hands them out, since it
// only sees its own incarnation's pods.
func (p *Pool) janitor(ctx context.Context) error {
	pods, err := p.client.CoreV1().Pods(p.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: kube.RunnerSelector().String(),
	})
	if err != nil {
		return fmt.Errorf("list sandbox pods: %w", err)
	}
	self := p.opts.Pod.Owner
	owners := map[string]string{} // owner name/uid -> why its pods are orphans ("" = alive)
	cleaned := 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		var why string
		switch ref := podOwnerRef(pod); {
		case pod.Labels[kube.LabelOwner] == p.claimer && pod.Labels[kube.LabelIncarnation] == kube.LabelValue(self.Incarnation):
			continue // this process's own: none exist before the first create
		case pod.Labels[kube.LabelOwner] == p.claimer && self.UID != "" && ref != nil && ref.UID == self.UID:
			why = "made by an earlier start of this serve container"
		default:
			why = p.orphaned(ctx, ref, owners)
		}
		if why == "" {
			continue
		}
		p.mu.Lock()
		p.exp.expectDelete(pod.Name, time.Now())
		p.mu.Unlock()
		if err := p.deletePod(ctx, pod.Name, why); err != nil {
			continue
		}
		cleaned++
		p.m.orphans.Inc()
		p.log.Info("janitor deleted sandbox pod", "pod", pod.Name, "pod_owner", pod.Labels[kube.LabelOwner],
			"pod_incarnation", pod.Labels[kube.LabelIncarnation], "why", why)
	}
	p.log.Info("janitor done", "sandbox_pods", len(pods.Items), "deleted", cleaned)
	return nil
}

// podOwnerRef is pod's ownerReference to a serve pod, or nil.
func podOwnerRef(pod *corev1.Pod) *metav1.OwnerReference {
	for i := range pod.OwnerReferences {
		r := &pod.OwnerReferences[i]
		if r.Kind == "Pod" && r.APIVersion == "v1" {
			return r
		}
	}
	return nil
}

// orphaned says why the owner pod ref points at is gone, or "" when it
// lives or cannot be judged (no ref). owners caches answers per owner.
func (p *Pool) orphaned(ctx context.Context, ref *metav1.OwnerReference, owners map[string]string) string {
	if ref == nil {
		return ""
	}
	key := ref.Name + "/" + string(ref.UID)
	if why, ok := owners[key]; ok {
		return why
	}
	why := ""
	owner, err := p.client.CoreV1().Pods(p.opts.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("owner pod %s is gone", ref.Name)
	case err != nil:
		p.log.Warn("janitor: look up owner pod", "owner", ref.Name, "err", err)
		return "" // do not cache: maybe next time
	case owner.UID != types.UID(ref.UID):
		why = fmt.Sprintf("owner pod %s was replaced", ref.Name)
	}
	owners[key] = why
	return why
}
