package toolpod

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/wire"
)

const testNS = "sandbox"

// env is a Caller on a fake clientset whose stand-in kubelet gives each new
// pod the status start returns; every pod's runner is one httptest server
// (pod IP 127.0.0.1, the runner port its port).
type env struct {
	cs      *fake.Clientset
	caller  *Caller
	created atomic.Value // *corev1.Pod: the last pod created
	body    atomic.Value // string: the last body the runner got
	creates atomic.Int32
}

func newEnv(t *testing.T, start func(*corev1.Pod), runner http.HandlerFunc, ready time.Duration) *env {
	t.Helper()
	e := &env{cs: fake.NewClientset()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.body.Store(string(b))
		runner(w, r)
	}))
	t.Cleanup(srv.Close)
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	e.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.CreationTimestamp = metav1.Now()
		e.creates.Add(1)
		start(pod)
		e.created.Store(pod.DeepCopy())
		return false, nil, nil
	})
	c, err := New(Options{
		Client:    e.cs,
		Namespace: testNS,
		Pod: kube.ToolPodOptions{SandboxImage: "sandbox:dev", RunnerPort: int32(port),
			Owner: kube.Owner{Name: "serve-0", UID: "serve-0-uid"}, Internet: true},
		ReadyTimeout: ready,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.caller = c
	return e
}

func ready(pod *corev1.Pod) {
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "127.0.0.1"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
}

func pullBackOff(pod *corev1.Pod) {
	pod.Status.Phase = corev1.PodPending
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: kube.ToolInitContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.RunnerContainer, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "agent:missing"`}}}}
}

func answer(res wire.CallResult) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/call" {
			http.NotFound(w, r)
			return
		}
		api.WriteCallResult(w, res)
	}
}

func testCall(t *testing.T, image string) api.Call {
	t.Helper()
	c, err := api.DecodeCall(strings.NewReader(`{"image":"` + image + `","function":"tools.weather:get","kwargs":{"city":"Oslo"},"timeout_s":5,"env":{"UNITS":"metric"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) podCount(t *testing.T) int {
	t.Helper()
	l, err := e.cs.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

func TestCallRunsInItsOwnPodAndDeletesIt(t *testing.T) {
	e := newEnv(t, ready, answer(wire.CallResult{SandboxID: "ignored", Result: json.RawMessage(`{"t":3}`), Process: wire.Process{Stdout: "hi\n"}}), 5*time.Second)
	res, err := e.caller.Call(t.Context(), testCall(t, "agent:dev"))
	if err != nil {
		t.Fatal(err)
	}
	pod := e.created.Load().(*corev1.Pod)
	if res.SandboxID != pod.Name || string(res.Result) != `{"t":3}` || res.Stdout != "hi\n" {
		t.Errorf("result %+v from pod %s", res, pod.Name)
	}
	if pod.Spec.Containers[0].Image != "agent:dev" || pod.Spec.InitContainers[0].Image != "sandbox:dev" {
		t.Errorf("images: main %s, init %s", pod.Spec.Containers[0].Image, pod.Spec.InitContainers[0].Image)
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("%d pods left after the call", n)
	}
	// The runner got the call itself, env included, and nothing of serve's.
	var sent wire.CallRequest
	if err := json.Unmarshal([]byte(e.body.Load().(string)), &sent); err != nil || sent.Function != "tools.weather:get" || sent.Env["UNITS"] != "metric" {
		t.Errorf("runner got %v (%v)", e.body.Load(), err)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		// The runner's node address alone, which it keeps from the tool.
		env := slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool { return e.Name == seal.NodeIPEnv })
		if len(env) != 0 || len(c.EnvFrom) != 0 {
			t.Errorf("container %s carries env %v %v: the pod's environment must be the image's alone", c.Name, env, c.EnvFrom)
		}
	}
}

func TestCallNotReadyIs504NamingTheWait(t *testing.T) {
	e := newEnv(t, pullBackOff, answer(wire.CallResult{}), 300*time.Millisecond)
	start := time.Now()
	_, err := e.caller.Call(t.Context(), testCall(t, "agent:missing"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusGatewayTimeout ||
		!strings.Contains(ae.Msg, "ImagePullBackOff") || !strings.Contains(ae.Msg, "agent:missing") ||
		!strings.Contains(ae.Msg, kube.ToolNotReady) {
		t.Fatalf("err %v, want 504 naming the image pull back-off, in the words verify knows it by", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s for a 300ms deadline", d)
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("%d pods left after the 504", n)
	}
}

func TestCallFailedPodIs502(t *testing.T) {
	e := newEnv(t, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: kube.ToolInitContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 127, Reason: "Error", Message: "cp: not found"}}}}
	}, answer(wire.CallResult{}), 5*time.Second)
	_, err := e.caller.Call(t.Context(), testCall(t, "agent:dev"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Msg, "exited with code 127") {
		t.Fatalf("err %v, want 502 naming the init container's exit", err)
	}
	if got := e.creates.Load(); got != 1 {
		t.Errorf("%d pods made for a pod whose own container failed, want 1", got)
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("%d pods left", n)
	}
}

// neverStarted is the status the kubelet gives a pod whose container the
// runtime failed to create (runc's "unable to freeze" on a busy cgroup v1
// node).
func neverStarted(pod *corev1.Pod) {
	pod.Status.Phase = corev1.PodFailed
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: kube.ToolInitContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.RunnerContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 128, Reason: "StartError", Message: "failed to create containerd task: runc create failed: unable to freeze"}}}}
}

// TestCallPodThatNeverStartedIsMadeAgain: the call goes to a new pod when
// its pod's container never started, and gives up after startAttempts
// pods with a 502 that says why. The control is TestCallFailedPodIs502: a
// pod whose own container ran and failed is not made again.
func TestCallPodThatNeverStartedIsMadeAgain(t *testing.T) {
	var n atomic.Int32
	e := newEnv(t, func(p *corev1.Pod) {
		if n.Add(1) < startAttempts {
			neverStarted(p)
			return
		}
		ready(p)
	}, answer(wire.CallResult{Result: json.RawMessage(`1`)}), 5*time.Second)
	res, err := e.caller.Call(t.Context(), testCall(t, "agent:dev"))
	if err != nil || string(res.Result) != "1" {
		t.Fatalf("result %+v, err %v; want the call answered by the last pod", res, err)
	}
	if got := e.creates.Load(); got != startAttempts {
		t.Errorf("%d pods made, want %d", got, startAttempts)
	}
	if res.SandboxID != e.created.Load().(*corev1.Pod).Name {
		t.Errorf("sandbox_id %s, want the last pod's name", res.SandboxID)
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("%d pods left", n)
	}

	e = newEnv(t, neverStarted, answer(wire.CallResult{}), 5*time.Second)
	_, err = e.caller.Call(t.Context(), testCall(t, "agent:dev"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Msg, "containers started") || !strings.Contains(ae.Msg, "StartError") {
		t.Fatalf("err %v, want 502 saying the containers never started", err)
	}
	if got := e.creates.Load(); got != startAttempts {
		t.Errorf("%d pods made, want %d", got, startAttempts)
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("%d pods left", n)
	}
}

func TestCallRunnerRefusalPassesThrough(t *testing.T) {
	e := newEnv(t, ready, func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, http.StatusBadRequest, "timeout_s 200 over this runner's limit")
	}, 5*time.Second)
	_, err := e.caller.Call(t.Context(), testCall(t, "agent:dev"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Msg, "limit") {
		t.Fatalf("err %v", err)
	}
}

func TestCallerCancelledRequestStillDeletes(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	e := newEnv(t, ready, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}, 5*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := e.caller.Call(ctx, testCall(t, "agent:dev")); err == nil {
		t.Fatal("a call whose client went away succeeded")
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("%d pods left after the client went away", n)
	}
}

func TestJanitor(t *testing.T) {
	e := newEnv(t, ready, answer(wire.CallResult{}), time.Second)
	mk := func(name, owner string, phase corev1.PodPhase) {
		p := kube.ToolPod(kube.ToolPodOptions{Namespace: testNS, Image: "a", SandboxImage: "s", Owner: kube.Owner{Name: owner}, ActiveDeadline: time.Hour}, name, kube.MinUID)
		p, err := e.cs.CoreV1().Pods(testNS).Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = phase // after the stand-in kubelet's start
		if _, err := e.cs.CoreV1().Pods(testNS).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("ours-stale", "serve-0", corev1.PodRunning)
	mk("ours-held", "serve-0", corev1.PodRunning)
	mk("theirs-running", "serve-1", corev1.PodRunning)
	mk("theirs-done", "serve-1", corev1.PodFailed)
	snippet := kube.SnippetPod(kube.PodOptions{Namespace: testNS, Image: "s", Owner: kube.Owner{Name: "serve-0"}}, "snippet", kube.MinUID)
	if _, err := e.cs.CoreV1().Pods(testNS).Create(t.Context(), snippet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.caller.active["ours-held"] = true
	e.caller.janitor(t.Context())
	l, _ := e.cs.CoreV1().Pods(testNS).List(t.Context(), metav1.ListOptions{})
	var left []string
	for _, p := range l.Items {
		left = append(left, p.Name)
	}
	if strings.Join(left, ",") != "ours-held,snippet,theirs-running" {
		t.Errorf("left %v, want the held call's pod, the snippet pod and another replica's live pod", left)
	}
}

func TestSlotsBoundConcurrentCalls(t *testing.T) {
	e := newEnv(t, ready, answer(wire.CallResult{}), time.Second)
	for range cap(e.caller.slots) {
		e.caller.slots <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := e.caller.Call(ctx, testCall(t, "agent:dev")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call beyond the slots: %v, want it to wait", err)
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("a waiting call created %d pods", n)
	}
}

// TestCallUnsealedIs503: a tool pod that runs but never proves its egress
// cut (the tool policies not enforced) ends the call with the 503 that says
// so and why, not a 504 about scheduling; the control is the image pull
// back-off above, still a 504.
func TestCallUnsealedIs503(t *testing.T) {
	unproven := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = "127.0.0.1"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	}
	e := newEnv(t, unproven, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/seal" {
			api.WriteJSON(w, http.StatusOK, api.SealState{Checked: true, Evidence: "tcp 10.96.0.1:443 connected in 1 ms"})
			return
		}
		t.Errorf("the runner got %s %s before it was Ready", r.Method, r.URL.Path)
	}, 300*time.Millisecond)
	_, err := e.caller.Call(t.Context(), testCall(t, "agent:dev"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.HasPrefix(ae.Msg, api.NotSealed) ||
		!strings.Contains(ae.Msg, "10.96.0.1:443 connected") {
		t.Fatalf("err %v, want 503 %q naming the evidence", err, api.NotSealed)
	}
	if n := e.podCount(t); n != 0 {
		t.Errorf("%d pods left", n)
	}
}

// TestCallRunnerUnsealedIs503: a runner that lost its proof after it was
// Ready refuses the call; the caller says why, as a 503, not a 502.
func TestCallRunnerUnsealedIs503(t *testing.T) {
	e := newEnv(t, ready, func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, http.StatusServiceUnavailable, api.NotSealed+": tcp 10.96.0.1:443 connected in 1 ms (checked 3ms ago)")
	}, 5*time.Second)
	_, err := e.caller.Call(t.Context(), testCall(t, "agent:dev"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.HasPrefix(ae.Msg, api.NotSealed) {
		t.Fatalf("err %v, want 503 %q", err, api.NotSealed)
	}
}

// TestMaxAnswerFollowsReadyTimeout: raising --tool-ready-timeout raises the
// longest answer the caller reports, and so serve's write timeout, by as
// much.
func TestMaxAnswerFollowsReadyTimeout(t *testing.T) {
	short := newEnv(t, ready, answer(wire.CallResult{}), time.Minute).caller.MaxAnswer()
	long := newEnv(t, ready, answer(wire.CallResult{}), 15*time.Minute).caller.MaxAnswer()
	if long-short != 14*time.Minute || short < time.Minute+api.MaxCallTimeoutS*time.Second {
		t.Errorf("MaxAnswer: %s ready within a minute, %s within fifteen", short, long)
	}
}

// TestCallBrokenAnswerIsNever200: a runner's connection that breaks
// mid-answer (a close-delimited answer cut short, as when the tool pod's
// node dies), or a 200 whose JSON is not a call's answer, is a 502 naming
// the pod, never a 200 without the tool's result.
func TestCallBrokenAnswerIsNever200(t *testing.T) {
	for name, raw := range map[string]string{
		"cut":          `{"sandbox_id":"x","exit_code":0,"resu`,
		"empty":        ``,
		"empty object": `{}`,
		"null":         `null`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, ready, func(w http.ResponseWriter, r *http.Request) {
				c, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + raw))
				c.Close()
			}, 5*time.Second)
			res, err := e.caller.Call(t.Context(), testCall(t, "agent:dev"))
			ae, ok := api.AsError(err)
			if !ok || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Msg, "tool pod sandbox-tool-") {
				t.Fatalf("res %+v, err %v: want a 502 naming the tool pod", res, err)
			}
			t.Log(ae.Msg)
		})
	}
}
