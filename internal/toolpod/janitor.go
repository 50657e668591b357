package toolpod

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/kube"
)

// janitor deletes the tool pods nobody waits for: this owner's pods that no
// call in flight holds (a delete that failed, or an earlier run of this
// service), and any owner's pods that have finished (killed at their
// activeDeadlineSeconds, or whose owner could not delete them). Pods of a
// vanished owner are also the garbage collector's, through their
// ownerReference; this makes it prompt.
func (c *Caller) janitor(ctx context.Context) {
	pods, err := c.opts.Client.CoreV1().Pods(c.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: kube.ToolSelector("").String(),
	})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("janitor: list tool pods", "err", err)
		}
		return
	}
	owner := kube.LabelValue(c.opts.Pod.Owner.Name)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		c.mu.Lock()
		held := c.active[p.Name]
		c.mu.Unlock()
		var why string
		switch {
		case held:
			continue
		case p.Labels[kube.LabelOwner] == owner:
			// Calls name their pod before creating it, so a pod of ours
			// that no call holds is one whose call is over.
			why = "no call of this service holds it"
		case kube.IsFinished(p):
			why = "finished"
		case !p.CreationTimestamp.IsZero() && time.Since(p.CreationTimestamp.Time) > c.opts.Pod.ActiveDeadline+time.Minute:
			why = "past its deadline"
		default:
			continue
		}
		if err := c.delete(ctx, p.Name); err != nil {
			c.log.Warn("janitor: delete tool pod", "pod", p.Name, "err", err)
			continue
		}
		c.m.cleaned.Inc()
		c.log.Info("janitor deleted tool pod", "pod", p.Name, "pod_owner", p.Labels[kube.LabelOwner], "why", why)
	}
}
