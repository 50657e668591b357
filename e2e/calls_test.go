//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

// toolSelector selects every tool-call pod.
const toolSelector = "app.kubernetes.io/name=sandbox-runner,sandbox.dev/kind=tool"

// callReply is one POST /v1/call as the test saw it.
type callReply struct {
	status  int
	body    string
	res     wire.CallResult
	errMsg  string
	elapsed time.Duration
}

func (r callReply) String() string {
	return fmt.Sprintf("HTTP %d after %s: %s", r.status, r.elapsed.Round(time.Millisecond), clipOut(r.body))
}

// postCall sends body (a request, or raw bytes) to base's /v1/call.
func postCall(ctx context.Context, base string, body any) (callReply, error) {
	raw, ok := body.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return callReply{}, err
		}
	}
	// A call's answer comes after its pod's start: the readiness deadline
	// and the longest call, with room.
	ctx, cancel := context.WithTimeout(ctx, kindenv.ToolReadyTimeout+api.MaxCallTimeoutS*time.Second+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/call", bytes.NewReader(raw))
	if err != nil {
		return callReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := authorize(req); err != nil {
		return callReply{}, err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return callReply{}, fmt.Errorf("POST /v1/call: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, api.MaxCallAnswer+1<<20))
	r := callReply{status: resp.StatusCode, body: string(b), elapsed: time.Since(start)}
	if err != nil {
		return r, fmt.Errorf("read answer: %w", err)
	}
	if r.status == http.StatusOK {
		if err := json.Unmarshal(b, &r.res); err != nil {
			return r, fmt.Errorf("decode result: %w: %s", err, clipOut(r.body))
		}
	} else {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		r.errMsg = e.Error
	}
	return r, nil
}

// toolCall builds a request for the agent image.
func toolCall(function string, args []any, kwargs map[string]any, timeoutS int, env map[string]string) map[string]any {
	req := map[string]any{"image": kindenv.AgentImage, "function": function}
	if args != nil {
		req["args"] = args
	}
	if kwargs != nil {
		req["kwargs"] = kwargs
	}
	if timeoutS > 0 {
		req["timeout_s"] = timeoutS
	}
	if env != nil {
		req["env"] = env
	}
	return req
}

// mustCall makes a call that must be answered 200, and checks that its pod
// is gone afterwards.
func mustCall(ctx context.Context, t *testing.T, req map[string]any) wire.CallResult {
	t.Helper()
	r, err := postCall(ctx, service(ctx), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusOK {
		t.Fatalf("%s %v: %s", req["function"], req["args"], r)
	}
	t.Logf("%s: %s in %s (run %d ms), exit %d, stdout %d B, stderr %d B", req["function"], r.res.SandboxID,
		r.elapsed.Round(time.Millisecond), r.res.DurationMS, r.res.ExitCode, len(r.res.Stdout), len(r.res.Stderr))
	assertToolPodGone(ctx, t, r.res.SandboxID)
	return r.res
}

// assertToolPodGone waits briefly for the call's pod to leave the API: the
// service deletes it right after the answer, without grace.
func assertToolPodGone(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	if !strings.HasPrefix(name, "sandbox-tool-") {
		t.Errorf("sandbox_id %q is not a tool pod's name", name)
		return
	}
	cs := clientset(ctx, t)
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(kindenv.Namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("tool pod %s still in the API 30 s after its answer", name)
	}
}

// assertNoToolPods waits for every tool pod to be gone.
func assertNoToolPods(ctx context.Context, t *testing.T) {
	t.Helper()
	cs := clientset(ctx, t)
	var left []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: toolSelector})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		left = left[:0]
		for _, p := range l.Items {
			left = append(left, p.Name+" ("+p.Spec.Containers[0].Image+")")
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("tool pods left 30 s after the calls: %v", left)
	}
}

func decodeValue(t *testing.T, res wire.CallResult, v any) {
	t.Helper()
	if res.Error != nil {
		t.Fatalf("the tool raised: %+v", *res.Error)
	}
	if err := json.Unmarshal(res.Result, v); err != nil {
		t.Fatalf("result %s: %v", clipOut(string(res.Result)), err)
	}
}

// TestToolCalls drives each tool of the sample agent image through
// POST /v1/call, and the refusals of the API.
func TestToolCalls(t *testing.T) {
	f := features.New("tool calls run in one-use pods of the agent image").
		WithLabel("needs", "service").
		Setup(withService).
		Assess("a value comes back, apart from what the tool printed", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			res := mustCall(ctx, t, toolCall("tools.sample:add", []any{2, 3}, map[string]any{"scale": 10}, 0, nil))
			var v struct {
				Sum  int   `json:"sum"`
				Args []int `json:"args"`
			}
			decodeValue(t, res, &v)
			if v.Sum != 50 || !slices.Equal(v.Args, []int{2, 3}) || res.ExitCode != 0 {
				t.Errorf("add(2, 3, scale=10) = %s, exit %d", res.Result, res.ExitCode)
			}
			if !strings.Contains(res.Stdout, "adding 2 3") {
				t.Errorf("the tool's print is not in stdout: %q", res.Stdout)
			}
			return ctx
		}).
		Assess("an exception comes back as error, with its traceback", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			res := mustCall(ctx, t, toolCall("tools.sample:boom", []any{"on purpose"}, nil, 0, nil))
			e := res.Error
			switch {
			case e == nil:
				t.Fatalf("no error: result %s", res.Result)
			case e.Kind != wire.CallRaised || e.Type != "ValueError" || !strings.Contains(e.Message, "boom: on purpose"):
				t.Errorf("error %+v", *e)
			case !strings.Contains(e.Traceback, "in boom") || !strings.Contains(e.Traceback, "tools/sample.py"):
				t.Errorf("traceback does not show the tool: %q", e.Traceback)
			}
			if string(res.Result) != "null" {
				t.Errorf("result %s beside an error", res.Result)
			}
			return ctx
		}).
		Assess("a flood of prints is cut, and the value still comes back whole", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			const lines = 30000 // about 3.3 MB, beyond stdout's 1 MiB
			res := mustCall(ctx, t, toolCall("tools.sample:chatty", []any{lines}, nil, 60, nil))
			var v struct {
				Printed int `json:"printed"`
			}
			decodeValue(t, res, &v)
			if v.Printed != lines {
				t.Errorf("result %s", res.Result)
			}
			if !res.StdoutTruncated || len(res.Stdout) > 1<<20+4096 {
				t.Errorf("stdout %d B, truncated=%v: want it cut near 1 MiB", len(res.Stdout), res.StdoutTruncated)
			}
			return ctx
		}).
		Assess("the internet stand-in is reached", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			res := mustCall(ctx, t, toolCall("tools.sample:fetch", []any{Standins(ctx).Internet.URL()}, nil, 30, nil))
			var v struct {
				Status int    `json:"status"`
				Body   string `json:"body"`
			}
			decodeValue(t, res, &v)
			if v.Status != 200 || !strings.Contains(v.Body, kindenv.CanaryToken) {
				t.Errorf("fetch(%s) = %s", Standins(ctx).Internet.URL(), res.Result)
			}
			return ctx
		}).
		Assess("the metadata stand-in is not", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			res := mustCall(ctx, t, toolCall("tools.sample:metadata", []any{Standins(ctx).Metadata.URL()}, nil, 30, nil))
			var v struct {
				Reached bool   `json:"reached"`
				Error   string `json:"error"`
			}
			decodeValue(t, res, &v)
			if v.Reached || v.Error == "" {
				t.Errorf("metadata(%s) = %s", Standins(ctx).Metadata.URL(), res.Result)
			}
			return ctx
		}).
		Assess("the environment is the image's and the request's, no platform's", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			res := mustCall(ctx, t, toolCall("tools.sample:environ", nil, nil, 0, map[string]string{"UNITS": "metric"}))
			var env map[string]string
			decodeValue(t, res, &env)
			for k, want := range map[string]string{"UNITS": "metric", "AGENT_SAMPLE": "1", "PYTHONPATH": "/app"} {
				if env[k] != want {
					t.Errorf("%s=%q, want %q (env %v)", k, env[k], want, env)
				}
			}
			for k := range env {
				if strings.HasPrefix(k, "KUBERNETES_") || strings.HasPrefix(k, "SANDBOX_") || k == "POD_NAME" || k == "POD_UID" {
					t.Errorf("platform variable %s reached the tool", k)
				}
			}
			return ctx
		}).
		Assess("a tool past its timeout is killed with its setsid grandchild", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			const timeoutS, life = 2, 8
			res := mustCall(ctx, t, toolCall("tools.sample:sleeper", []any{life}, nil, timeoutS, nil))
			if !res.TimedOut || res.ExitCode != -1 || res.Error != nil {
				t.Errorf("timed_out=%v exit %d error %+v, want a timeout", res.TimedOut, res.ExitCode, res.Error)
			}
			beats := regexp.MustCompile(`(?m)^HB ([0-9.]+)$`).FindAllStringSubmatch(res.Stdout, -1)
			if len(beats) == 0 {
				t.Fatalf("the grandchild was never heard (stdout %q): its silence proves nothing", clipOut(res.Stdout))
			}
			last, _ := strconv.ParseFloat(beats[len(beats)-1][1], 64)
			if last > timeoutS+1.5 {
				t.Errorf("the setsid grandchild was alive at %.2f s, past the %d s timeout", last, timeoutS)
			}
			if res.DurationMS > (timeoutS+2)*1000 {
				t.Errorf("the run took %d ms for a %d s timeout", res.DurationMS, timeoutS)
			}
			return ctx
		}).
		Assess("a @sandboxed tool is unwrapped and called", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			res := mustCall(ctx, t, toolCall("tools.decorated:shout", []any{"hi"}, nil, 0, nil))
			var v struct {
				Text string `json:"text"`
				Host string `json:"host"`
			}
			decodeValue(t, res, &v)
			if v.Text != "HI" || v.Host != res.SandboxID {
				t.Errorf("shout('hi') = %s in %s", res.Result, res.SandboxID)
			}
			return ctx
		}).
		Assess("a 2 MiB argument is refused with 413", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			// The service answers before it has read the body and then
			// closes; a write still in flight may see the reset first.
			var r callReply
			var err error
			for range 3 {
				if r, err = postCall(ctx, service(ctx), toolCall("tools.sample:add", []any{strings.Repeat("x", 2<<20), "y"}, nil, 0, nil)); err == nil {
					break
				}
				t.Logf("2 MiB call: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.status != http.StatusRequestEntityTooLarge {
				t.Errorf("%s, want 413", r)
			}
			return ctx
		}).
		Assess("an image outside the allow list is refused with 403", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			req := toolCall("tools.sample:add", []any{1, 2}, nil, 0, nil)
			req["image"] = Suite(ctx).Image // the sandbox image: real, but not allowed
			r, err := postCall(ctx, service(ctx), req)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != http.StatusForbidden || !strings.Contains(r.errMsg, "SANDBOX_TOOL_IMAGES") {
				t.Errorf("%s, want 403 naming the setting", r)
			}
			return ctx
		}).
		Assess("an image that does not exist is a 504 within the deadline, naming the pull error", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			req := toolCall("tools.sample:add", []any{1, 2}, nil, 0, nil)
			req["image"] = kindenv.AbsentImagePrefix + "agent:none"
			r, err := postCall(ctx, service(ctx), req)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("absent image: %s", r)
			if r.status != http.StatusGatewayTimeout {
				t.Fatalf("%s, want 504", r)
			}
			if !strings.Contains(r.errMsg, "ImagePullBackOff") && !strings.Contains(r.errMsg, "ErrImagePull") {
				t.Errorf("the 504 does not name the pull error: %q", r.errMsg)
			}
			if !strings.Contains(r.errMsg, "agent:none") {
				t.Errorf("the 504 does not name the image: %q", r.errMsg)
			}
			if limit := kindenv.ToolReadyTimeout + 15*time.Second; r.elapsed > limit {
				t.Errorf("the 504 took %s, more than the %s deadline and slack", r.elapsed, kindenv.ToolReadyTimeout)
			}
			return ctx
		}).
		Assess("no tool pod is left", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			assertNoToolPods(ctx, t)
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// TestToolCallCost measures a call from its request to its answer (the pod's
// creation, start and deletion included) with the image on the node.
func TestToolCallCost(t *testing.T) {
	const n = 10
	f := features.New("the cost of a tool call").
		WithLabel("needs", "service").
		Setup(withService).
		Assess("create to result, p50 and p90", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			var total, run []time.Duration
			for i := range n {
				r, err := postCall(ctx, service(ctx), toolCall("tools.sample:add", []any{i, 1}, nil, 0, nil))
				if err != nil {
					t.Fatal(err)
				}
				if r.status != http.StatusOK || r.res.Error != nil {
					t.Fatalf("call %d: %s", i, r)
				}
				total = append(total, r.elapsed)
				run = append(run, time.Duration(r.res.DurationMS)*time.Millisecond)
			}
			p := func(ds []time.Duration, q float64) time.Duration {
				s := slices.Clone(ds)
				slices.Sort(s)
				return s[min(len(s)-1, int(q*float64(len(s))))]
			}
			t.Logf("tool call cost over %d sequential calls of tools.sample:add: request to answer p50 %s p90 %s (the function's own run p50 %s); all: %v",
				n, p(total, 0.5).Round(time.Millisecond), p(total, 0.9).Round(time.Millisecond), p(run, 0.5).Round(time.Millisecond), total)
			if p(total, 0.5) > kindenv.ToolReadyTimeout {
				t.Errorf("median call %s, beyond the readiness deadline", p(total, 0.5))
			}
			assertNoToolPods(ctx, t)
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}
