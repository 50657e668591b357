package toolpod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/runnerclient"
	"github.com/sandboxd/sandbox/wire"
)

// MaxAnswer is the longest a call may take: the wait for a slot, the pod's
// readiness deadline, the longest call and the runner's slack after it,
// and the look at a dead pod's status (verdictWait). It implements
// server.MaxAnswerer.
func (c *Caller) MaxAnswer() time.Duration {
	return slotWait + c.opts.ReadyTimeout + api.MaxCallTimeoutS*time.Second + runnerclient.Slack + verdictWait
}

// Call runs call in a new pod of call.Image and deletes the pod before it
// returns (or, if the delete fails, leaves it to the janitor and
// activeDeadlineSeconds). A pod that is not Ready within the readiness
// deadline is a 504 naming what it waited for; one whose containers never
// started is made again, up to startAttempts pods within that deadline.
func (c *Caller) Call(ctx context.Context, call api.Call) (wire.CallResult, error) {
	if err := c.acquire(ctx); err != nil {
		return wire.CallResult{}, err
	}
	defer func() { <-c.slots }()
	c.calls.Add(1)
	defer c.calls.Done()

	o := c.opts.Pod
	o.Image = call.Image
	o.RequestID = call.RequestID
	if err := c.egress(&o, call.Image, call.Egress); err != nil {
		return wire.CallResult{}, err
	}
	if f := c.opts.Fence; f != nil && o.Egress == "" && o.Internet {
		if err := f.Check(); err != nil {
			return wire.CallResult{}, &api.Error{Status: http.StatusServiceUnavailable, RetryAfter: 5 * time.Second,
				Msg: "tool pods' egress is not fenced off the cluster's own addresses yet: " + err.Error()}
		}
		// The pod's runner proves some of them cut too before it is Ready.
		o.Seal.Probes = append(slices.Clone(o.Seal.Probes), f.SealProbes()...)
	}
	// The readiness deadline covers every attempt at a pod.
	wctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	var (
		ready *corev1.Pod
		name  string
		log   *slog.Logger
	)
	for attempt := 1; ; attempt++ {
		name = kube.ToolPodName()
		log = c.log.With("pod", name, "image", call.Image, "function", call.Function())
		var err error
		ready, err = c.start(wctx, ctx, o, name, log)
		if err == nil {
			break
		}
		c.remove(name, log)
		if !errors.Is(err, errNeverStarted) || attempt == startAttempts {
			return wire.CallResult{}, err
		}
		log.Warn("the tool pod's container never started; making the pod again", "attempt", attempt, "err", err)
	}
	defer c.remove(name, log)
	res, err := c.send(ctx, ready, call)
	if err != nil {
		log.Info("call failed", "err", err)
		return res, err
	}
	res.SandboxID = name
	return res, nil
}

// egress sets the pod's egress from its image's: internet as before (or
// cluster DNS only, without --tool-internet-egress), none, or the gateway
// with the image's names, refused while the gateway is down.
//
// narrow, when set, is the caller's egress for the image (its policy
// entry's), which replaces the deployment's if it is within it.
func (c *Caller) egress(o *kube.ToolPodOptions, image, narrow string) error {
	e, _ := c.opts.Images.For(image, c.opts.DefaultEgress)
	if e.Mode == "" {
		e.Mode = egress.Internet
	}
	if narrow != "" {
		n, err := egress.Parse(narrow)
		if err != nil || !n.Within(e) {
			return &api.Error{Status: http.StatusForbidden,
				Msg: fmt.Sprintf("your policy entry gives image %q the egress %s, which is wider than this deployment's (%s): a caller's egress may only narrow it", image, narrow, e)}
		}
		e = n
	}
	switch e.Mode {
	case egress.None:
		o.Egress = kube.EgressNone
	case egress.Names:
		if c.opts.Gateway == nil {
			return &api.Error{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("image %q may reach only %s, through the egress gateway, and this service has none", image, e)}
		}
		proxy, err := c.opts.Gateway.Proxy()
		if err != nil {
			return &api.Error{Status: http.StatusServiceUnavailable, RetryAfter: 5 * time.Second,
				Msg: fmt.Sprintf("image %q reaches the internet only through the egress gateway, and the gateway is not available, so the call did not run: %v", image, err)}
		}
		o.Egress, o.EgressAllow, o.Proxy = kube.EgressGateway, e.String(), proxy
	}
	return nil
}

// startAttempts is how many pods a call makes, at most, when their
// containers never start (kube.NeverStarted): nothing of the call has run
// in such a pod, so another is safe, and the runtime's failure is rare
// enough that a third is as far as it is worth going.
const startAttempts = 3

// errNeverStarted marks a tool pod that ended before its containers
// started.
var errNeverStarted = errors.New("its container never started")

// start makes the call's pod under name and waits, until wctx ends, for it
// to be Ready. The pod is in c.active from before its creation; the caller
// removes it.
func (c *Caller) start(wctx, ctx context.Context, o kube.ToolPodOptions, name string, log *slog.Logger) (*corev1.Pod, error) {
	pod := kube.ToolPod(o, name, kube.RandomUID())
	c.mu.Lock()
	c.active[name] = true
	c.m.active.Set(float64(len(c.active)))
	c.mu.Unlock()

	// The watch opens before the create, so no status change is missed.
	w, err := c.watch(wctx, name)
	if err != nil {
		return nil, fmt.Errorf("watch tool pod %s: %w", name, err)
	}
	defer w.Stop()
	created := time.Now()
	if _, err := c.opts.Client.CoreV1().Pods(c.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		if apierrors.IsForbidden(err) {
			// Admission (Pod Security, a quota) refused it: say so plainly.
			return nil, &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("create tool pod: refused by the cluster: %v", err)}
		}
		return nil, fmt.Errorf("create tool pod %s: %w", name, err)
	}
	ready, err := c.waitReady(wctx, ctx, w, name)
	if err != nil {
		log.Info("tool pod not ready", "err", err, "waited", time.Since(created))
		return nil, err
	}
	c.m.ready.Observe(time.Since(created).Seconds())
	log.Debug("tool pod ready", "startup", time.Since(created))
	return ready, nil
}

// remove deletes the call's pod, off the request's context.
func (c *Caller) remove(name string, log interface{ Warn(string, ...any) }) {
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	err := c.delete(ctx, name)
	c.mu.Lock()
	delete(c.active, name)
	c.m.active.Set(float64(len(c.active)))
	c.mu.Unlock()
	if err != nil {
		log.Warn("delete tool pod failed; the janitor and activeDeadlineSeconds remain", "err", err)
	}
}

func (c *Caller) delete(ctx context.Context, name string) error {
	grace := int64(0)
	err := c.opts.Client.CoreV1().Pods(c.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete tool pod %s: %w", name, err)
	}
	return nil
}

func (c *Caller) watch(ctx context.Context, name string) (watch.Interface, error) {
	return c.opts.Client.CoreV1().Pods(c.opts.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
}

// waitReady follows the pod until it is Ready, fails, or wctx (the
// readiness deadline) ends. ctx is the request's: when it ends first, that
// is not the pod's fault.
func (c *Caller) waitReady(wctx, ctx context.Context, w watch.Interface, name string) (*corev1.Pod, error) {
	var last *corev1.Pod
	events := w.ResultChan()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				// The API server ends watches now and then: read the pod
				// and watch again.
				p, err := c.opts.Client.CoreV1().Pods(c.opts.Namespace).Get(wctx, name, metav1.GetOptions{})
				if err == nil {
					last = p
					if done, res, err := judgeStart(p); done {
						return res, err
					}
				}
				nw, err := c.watch(wctx, name)
				if err != nil {
					return nil, c.notReady(wctx, ctx, name, last)
				}
				defer nw.Stop()
				events = nw.ResultChan()
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				return nil, &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("tool pod %s was deleted before it was Ready", name)}
			}
			last = p
			if done, res, err := judgeStart(p); done {
				return res, err
			}
		case <-wctx.Done():
			return nil, c.notReady(wctx, ctx, name, last)
		}
	}
}

// judgeStart says whether the pod's start is over: Ready (the pod), or
// failed for good (an error naming why).
func judgeStart(p *corev1.Pod) (bool, *corev1.Pod, error) {
	switch {
	case kube.IsReady(p):
		return true, p, nil
	case kube.IsFinished(p) && strings.Contains(kube.RunnerMessage(p), api.NotSealed):
		// The runner gave up unproven (see seal.GiveUp): its last words say why.
		msg := kube.RunnerMessage(p)
		msg = strings.TrimSpace(msg[strings.LastIndex(msg, api.NotSealed)+len(api.NotSealed):])
		return true, nil, api.NotSealedError(fmt.Sprintf("tool pod %s could not prove its egress cut, so the call did not run (is NetworkPolicy enforced in this cluster?)%s", p.Name, msg))
	case kube.IsFinished(p) && kube.NeverStarted(p):
		return true, nil, fmt.Errorf("%w: %w", errNeverStarted, &api.Error{Status: http.StatusBadGateway,
			Msg: fmt.Sprintf("tool pod %s ended before its containers started (the runtime failed to create them): %s", p.Name, kube.ToolWaiting(p))})
	case kube.IsFinished(p) || p.DeletionTimestamp != nil:
		return true, nil, &api.Error{Status: http.StatusBadGateway,
			Msg: fmt.Sprintf("tool pod %s failed before it was Ready: %s", p.Name, kube.ToolWaiting(p))}
	}
	return false, nil, nil
}

// notReady is the error when the wait ended without a Ready pod.
func (c *Caller) notReady(wctx, ctx context.Context, name string, last *corev1.Pod) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	what := "its creation to be seen"
	if last != nil {
		what = kube.ToolWaiting(last)
		if err := c.unsealed(last); err != nil {
			return err
		}
	}
	return &api.Error{Status: http.StatusGatewayTimeout,
		Msg: fmt.Sprintf("tool pod %s %s %s (scheduling and image pull), waiting for: %s; the pod is deleted",
			name, kube.ToolNotReady, c.opts.ReadyTimeout, what)}
}

// unsealed asks the runner of a pod that is running but not Ready why: a
// runner that sees the network open (the tool pod policies not enforced)
// never becomes Ready, and the call gets the 503 that says so instead of a
// timeout that blames the image pull. nil when that is not the reason.
func (c *Caller) unsealed(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := api.ReadSealState(ctx, c.http, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(c.opts.Pod.RunnerPort))))
	if err != nil || st.Sealed || !st.Checked {
		return nil
	}
	c.log.Error(api.NotSealed+": a tool pod could not prove its egress cut; is NetworkPolicy enforced in this cluster, and its engine running?",
		"pod", p.Name, "evidence", st.Evidence)
	return api.NotSealedError(fmt.Sprintf("tool pod %s could not prove its egress cut within %s, so the call did not run (is NetworkPolicy enforced in this cluster?): %s; the pod is deleted",
		p.Name, c.opts.ReadyTimeout, st.Evidence))
}

// send posts the call to the pod's runner and reads its answer.
func (c *Caller) send(ctx context.Context, pod *corev1.Pod, call api.Call) (wire.CallResult, error) {
	body, err := wire.Marshal(api.CallWire(call))
	if err != nil {
		return wire.CallResult{}, err
	}
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(c.opts.Pod.RunnerPort)))
	rctx, cancel := context.WithTimeout(ctx, call.Timeout+runnerclient.Slack)
	defer cancel()
	start := time.Now()
	var res wire.CallResult
	_, err = runnerclient.Post(rctx, c.http, addr, "/v1/call", "tool pod "+pod.Name, body, maxAnswer, &res)
	var (
		refusal *runnerclient.Refusal
		lost    *runnerclient.Lost
	)
	switch {
	case errors.As(err, &refusal) && refusal.Unsealed():
		// The runner lost its proof after it was Ready: nothing ran.
		return wire.CallResult{}, api.NotSealedError(fmt.Sprintf("tool pod %s: %s", pod.Name, strings.TrimPrefix(strings.TrimPrefix(refusal.Msg, api.NotSealed), ": ")))
	case errors.As(err, &refusal):
		return wire.CallResult{}, refusal.Answer()
	case errors.As(err, &lost):
		if ctx.Err() != nil {
			return wire.CallResult{}, ctx.Err()
		}
		return c.verdict(pod.Name, start, lost.Err)
	case err != nil:
		return wire.CallResult{}, err
	}
	return res, nil
}

// verdict explains a call whose connection broke, from the pod's status: an
// out-of-memory kill is a result (exit 137, oom_killed), anything else a 502.
func (c *Caller) verdict(name string, start time.Time, cause error) (wire.CallResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), verdictWait)
	defer cancel()
	var d kube.Death
	for ctx.Err() == nil {
		p, err := c.opts.Client.CoreV1().Pods(c.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
		d = kube.DeathOf(p, apierrors.IsNotFound(err))
		if err != nil && !apierrors.IsNotFound(err) {
			d = kube.Death{}
		}
		if d.Dead {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if d.OOMKilled {
		return wire.CallResult{SandboxID: name, Result: json.RawMessage("null"), Process: wire.Process{
			Stderr:     "sandbox: the call exceeded the tool pod's memory limit (" + kube.ToolMemory + ") and the pod was killed (out of memory)\n",
			ExitCode:   137,
			DurationMS: time.Since(start).Milliseconds(),
			OOMKilled:  true,
		}}, nil
	}
	why := cause.Error()
	if d.Dead {
		why = d.Reason
	}
	return wire.CallResult{}, &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("tool pod %s: lost the runner during the call: %s", name, why)}
}
