package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/runnerclient"
	"github.com/sandboxd/sandbox/internal/weaken"
	"github.com/sandboxd/sandbox/wire"
)

// answerGrace is how long past the job's timeout the pool waits for the
// runner's answer before it answers in the runner's place. The runner kills
// the run at its deadline and answers within a few hundred milliseconds (it
// waits at most a second for the killed processes to exit). But its timer
// needs the pod's CPU, and a snippet can keep the node's kernel busy enough
// to hold it: a fork bomb failing forks at its process limit on a 2-CPU
// kind node kept the runner's timer 3.3 s late. The client does not wait
// for that: the pool answers with a timed-out result, and deleting the pod
// (no grace period) has the kubelet kill whatever is left of the run.
const answerGrace = 1500 * time.Millisecond

// errOverdue ends a run's request when answerGrace is over.
var errOverdue = errors.New("the runner did not answer in time after the job's timeout")

// oomStderr is the line a run killed with its pod for memory gets.
const oomStderr = "sandbox: the run exceeded the sandbox memory limit (" + kube.SnippetMemory + ") and the pod was killed (out of memory)\n"

// MaxAnswer is the longest an execution may take: the wait for a pod, the
// longest snippet and the runner's slack after it, and the wait for a dead
// pod's status to say why. It implements server.MaxAnswerer.
func (p *Pool) MaxAnswer() time.Duration {
	return p.opts.Wait + api.MaxTimeoutS*time.Second + runnerclient.Slack + verdictWait
}

// Execute runs job in a fresh pod from the pool and deletes the pod after.
// It implements server.Backend.
func (p *Pool) Execute(ctx context.Context, job exec.Job) (wire.Result, error) {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return wire.Result{}, errShuttingDown
	}
	p.inflight.Add(1)
	p.mu.Unlock()
	defer p.inflight.Done()

	body, err := wire.Marshal(api.FromJob(job))
	if err != nil {
		return wire.Result{}, err
	}
	deadline := time.Now().Add(p.opts.Wait)
	var lastErr error
	for range maxAttempts {
		start := time.Now()
		pod, err := p.claim(ctx, deadline)
		p.m.claimWait.Observe(time.Since(start).Seconds())
		api.TimingOf(ctx).Add(api.TimingClaim, time.Since(start))
		if err != nil {
			if lastErr != nil && errors.Is(err, api.ErrNoCapacity) {
				// Nothing ran, and the wait is over: the documented 503,
				// which a client may retry, as for any request that found
				// no pod in time. What went wrong with the pods we had is
				// the operator's to read.
				p.log.Warn("pool wait ran out after the claimed pods' runners could not be reached", "err", lastErr)
			}
			return wire.Result{}, err
		}
		log := p.log.With("pod", pod.Name)
		log.Debug("claimed sandbox pod", "wait", time.Since(start))

		res, err := p.deliver(ctx, pod, job, body)
		if p.noteUnsealedRunner(err) {
			log.Warn("runner refused the job: its network is not proven sealed; trying another pod", "err", err)
			p.release(pod, "network not sealed")
			lastErr = err
			continue
		}
		var nd *notDelivered
		if errors.As(err, &nd) {
			p.m.unreachable.Inc()
			log.Warn("runner unreachable before the job reached it; trying another pod", "err", err)
			p.suspectNode(pod.Spec.NodeName, err)
			p.release(pod, "runner unreachable")
			lastErr = err
			continue
		}
		p.release(pod, "used")
		if err != nil {
			log.Info("run failed", "err", err)
		}
		return res, err
	}
	p.mu.Lock()
	unsealed := p.sealErrorLocked()
	p.mu.Unlock()
	if unsealed != nil {
		return wire.Result{}, unsealed
	}
	return wire.Result{}, &api.Error{
		Status: http.StatusBadGateway,
		Msg:    fmt.Sprintf("no sandbox runner could be reached: %v", lastErr),
	}
}

// deliver runs job on pod, connecting again a few times when the runner
// cannot be reached at all. A NetworkPolicy engine rewriting its rules (on
// every pod change; under churn, every second or so) rejects some new
// connections for a moment, and a Ready pod refused that way is fine a few
// hundred milliseconds later: giving it up would cost a pod start, and a
// burst of such refusals would use up a request's pods. Nothing reached the
// runner, so a second connection is still its one job. Only a refusal is
// tried again: a connection that timed out has already cost dialTimeout.
func (p *Pool) deliver(ctx context.Context, pod *corev1.Pod, job exec.Job, body []byte) (wire.Result, error) {
	pause := redialPause
	for i := 0; ; i++ {
		res, err := p.runOn(ctx, pod, job, body)
		var nd *notDelivered
		if i == redials || !errors.As(err, &nd) || !isDialError(err) || !errors.Is(err, syscall.ECONNREFUSED) {
			return res, err
		}
		p.log.Debug("runner refused the connection; connecting again", "pod", pod.Name, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
		pause *= 2
	}
}

// runOn sends job to the runner of pod and reads its answer. A pod that dies
// during the run is judged from its status (see verdict).
func (p *Pool) runOn(ctx context.Context, pod *corev1.Pod, job exec.Job, body []byte) (wire.Result, error) {
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p.opts.Pod.RunnerPort)))
	timeout := job.Timeout
	if timeout <= 0 {
		timeout = api.MaxTimeoutS * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout+runnerclient.Slack)
	defer cancel()
	rctx, died := context.WithCancelCause(rctx)
	defer p.watchRun(rctx, pod.Name, died)()
	// A weakened runner that kills only the run's leader must show what
	// that costs (its answer waits for the tree), so the pool does not
	// step in for it.
	if !p.opts.Pod.Weaken.Has(weaken.KillLeaderOnly) {
		overdue := time.AfterFunc(timeout+answerGrace, func() { died(errOverdue) })
		defer overdue.Stop()
	}
	// The claim is recorded on the pod once the job is written to the runner:
	// off the request path, and only for a pod that really got a job.
	traced := httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				p.recordClaim(pod.Name)
			}
		},
	})
	start := time.Now()
	timing := api.TimingOf(ctx)
	defer func() { timing.Add(api.TimingRunner, time.Since(start)) }()
	var (
		res    wire.Result
		header http.Header
		err    error
	)
	if job.Output != nil {
		// The runner's output is relayed as it comes; a run cut short
		// below (overdue, the pod dead) has its result made here, which
		// the stream then says in full (see api.EventStream.Finish).
		header, err = runnerclient.PostStream(traced, p.http, addr, "/v1/execute", "sandbox pod "+pod.Name, body, maxResultBytes, &res, job.Output)
	} else {
		header, err = runnerclient.Post(traced, p.http, addr, "/v1/execute", "sandbox pod "+pod.Name, body, maxResultBytes, &res)
	}
	var (
		refusal *runnerclient.Refusal
		lost    *runnerclient.Lost
	)
	switch {
	case errors.As(err, &refusal):
		switch {
		case refusal.Unsealed():
			// The runner has no current proof that its egress is cut: nothing ran.
			return wire.Result{}, &errUnsealedRunner{pod: pod.Name, msg: refusal.Msg}
		case refusal.Status == http.StatusConflict || refusal.Status == http.StatusServiceUnavailable:
			// The runner refused the job (already used, not ready): nothing ran.
			return wire.Result{}, &notDelivered{pod: pod.Name, err: fmt.Errorf("runner refused the job: %s", refusal.Msg)}
		}
		return wire.Result{}, refusal.Answer()
	case errors.As(err, &lost):
		switch {
		case isDialError(err):
			return wire.Result{}, &notDelivered{pod: pod.Name, err: lost.Err}
		case ctx.Err() != nil:
			return wire.Result{}, ctx.Err()
		case errors.Is(context.Cause(rctx), errOverdue):
			if err := p.reachable(ctx, addr); err != nil {
				// Not a runner kept from the CPU: its pod cannot be reached
				// at all (its node lost or cut off), so a timed-out result
				// would be an answer nobody gave, blaming the snippet.
				p.m.podDeaths.Inc()
				p.log.Warn("the runner did not answer after the job's timeout and cannot be reached", "pod", pod.Name, "err", err)
				return wire.Result{}, &api.Error{Status: http.StatusBadGateway,
					Msg: fmt.Sprintf("sandbox pod %s: no answer %s after the job's timeout, and its runner cannot be reached (its node lost or cut off?): %v; the run's output is lost",
						pod.Name, answerGrace, err)}
			}
			return p.overdue(pod.Name, start, timeout), nil
		}
		return p.verdict(ctx, pod.Name, start, lost.Err)
	case err != nil:
		return wire.Result{}, err
	}
	parts := api.ParseServerTiming(header.Get(api.ServerTiming))
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		if name == api.TimingRunnerJob || api.IsPodPart(name) {
			timing.AddMS(name, parts[name])
		}
	}
	if res.SandboxID != "" && res.SandboxID != pod.Name {
		// The runner names its own pod: another pod answered at this IP (an
		// address reused after the claimed pod died). It ran the job, so its
		// name is the truthful id; it refuses any second job (409).
		p.log.Warn("a different sandbox pod answered at the claimed pod's address", "pod", pod.Name, "answered", res.SandboxID, "ip", pod.Status.PodIP)
		return res, nil
	}
	res.SandboxID = pod.Name
	return res, nil
}

// reachProbe bounds the probe of an overdue runner's address: a pod whose
// runner is only late still has a kernel that completes a handshake at
// once, however busy its code keeps the CPU.
const reachProbe = time.Second

// reachable opens (and closes) a connection to the runner at addr: nil when
// its pod's network answers.
func (p *Pool) reachable(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, reachProbe)
	defer cancel()
	c, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// overdue is the answer the pool gives when the runner of pod name has not
// answered answerGrace after the job's timeout: a timed-out run whose
// output is lost. Execute then deletes the pod, and the run with it.
func (p *Pool) overdue(name string, start time.Time, timeout time.Duration) wire.Result {
	p.m.overdue.Inc()
	p.log.Warn("the runner did not answer in time after the job's timeout; answering for it", "pod", name, "timeout", timeout, "grace", answerGrace)
	return wire.Result{SandboxID: name, Process: wire.Process{
		Stderr: exec.TimedOutLine(timeout) + fmt.Sprintf("sandbox: the runner did not answer within %s after the timeout "+
			"(the run had kept its pod from the CPU), so the run's output is lost; the pod was deleted\n", answerGrace),
		ExitCode:   -1,
		DurationMS: time.Since(start).Milliseconds(),
		TimedOut:   true,
	}}
}

// watchRun ends a run's request, with the pod's death as the cause, as
// soon as the informer shows the pod dead (its runner exited with an error
// or was OOM-killed, the pod was deleted, evicted or failed): the broken
// connection that would otherwise tell may come late, or, from a lost node,
// never. verdict then names the death. A runner's clean exit follows its
// answer and is left alone. The returned func stops the watch and waits
// for it.
func (p *Pool) watchRun(ctx context.Context, name string, died context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			pod, gone, changed := p.podNow(name)
			if d := kube.DeathOf(pod, gone); d.Dead && !kube.ExitedCleanly(pod) {
				died(fmt.Errorf("sandbox pod %s died during the run: %s", name, d.Reason))
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// podNow is the informer's view of pod name: the pod, or its last state
// when it is gone, and a channel closed at the next change.
func (p *Pool) podNow(name string) (pod *corev1.Pod, gone bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, err := p.lister.Get(name)
	if gone = err != nil; gone {
		pod = p.gone[name]
	}
	return pod, gone, p.changed
}

// verdict explains a run whose connection broke: it waits (on informer
// events, up to verdictWait) for the pod's status to say why, since the
// kubelet reports a container's end a moment after it happens. An OOM kill
// is a result (exit 137, oom_killed); any other death is a 502 naming it.
func (p *Pool) verdict(ctx context.Context, name string, start time.Time, cause error) (wire.Result, error) {
	timer := time.NewTimer(verdictWait)
	defer timer.Stop()
	for {
		pod, gone, changed := p.podNow(name)
		if d := kube.DeathOf(pod, gone); d.Dead {
			p.m.podDeaths.Inc()
			p.log.Warn("sandbox pod died during the run", "pod", name, "reason", d.Reason, "oom", d.OOMKilled, "cause", cause)
			if d.OOMKilled {
				return wire.Result{SandboxID: name, Process: wire.Process{
					Stderr:     oomStderr,
					ExitCode:   137,
					DurationMS: time.Since(start).Milliseconds(),
					OOMKilled:  true,
				}}, nil
			}
			return wire.Result{}, &api.Error{Status: http.StatusBadGateway,
				Msg: fmt.Sprintf("sandbox pod %s died during the run: %s", name, d.Reason)}
		}
		select {
		case <-changed:
		case <-timer.C:
			return wire.Result{}, &api.Error{Status: http.StatusBadGateway,
				Msg: fmt.Sprintf("sandbox pod %s: lost the runner during the run: %v", name, cause)}
		case <-ctx.Done():
			return wire.Result{}, ctx.Err()
		}
	}
}
