//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// agentNamespace is where the sample agent runs (granted by the suite's
// caller policy).
const agentNamespace = kindenv.AgentNamespace

// TestAgentDecoratedTools runs the sample agent (e2e/agent/driver.py) in a
// pod of its own image in another namespace: its @sandboxed tools go through
// python/sandbox_client to the Service, run in tool pods, and come back as a
// value and as a RemoteToolError with the remote traceback.
func TestAgentDecoratedTools(t *testing.T) {
	f := features.New("an agent's @sandboxed tools run in tool pods").
		WithLabel("needs", "service").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			cs := clientset(ctx, t)
			_ = cs.CoreV1().Namespaces().Delete(ctx, agentNamespace, metav1.DeleteOptions{})
			err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace, Labels: kindenv.ClientLabels()}}, metav1.CreateOptions{})
				return err == nil, nil // a namespace of a previous run may still be terminating
			})
			if err != nil {
				t.Fatalf("create namespace %s: %v", agentNamespace, err)
			}
			return ctx
		}).
		Assess("the value, the remote error, and no pod left", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			cs := clientset(ctx, t)
			c := restrictedContainer(kindenv.AgentImage, "python3", "/app/driver.py")
			c.Env = []corev1.EnvVar{
				{Name: "SANDBOX_URL", Value: "http://" + kindenv.Deployment + "." + kindenv.Namespace + ".svc"},
				{Name: "AGENT_IMAGE", Value: kindenv.AgentImage},
				{Name: "HOME", Value: "/tmp"},
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: agentNamespace},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers:                    []corev1.Container{c},
				},
			}
			// Its token, where python/sandbox_client reads it by default.
			kindenv.WithToken(pod)
			if _, err := cs.CoreV1().Pods(agentNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var phase corev1.PodPhase
			// Two tool calls, each a pod start, plus the agent's own.
			err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
				p, err := cs.CoreV1().Pods(agentNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
				if err != nil {
					return false, nil //nolint:nilerr // retry until the deadline
				}
				phase = p.Status.Phase
				return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
			})
			logs, lerr := cs.CoreV1().Pods(agentNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).Do(ctx).Raw()
			t.Logf("agent pod %s (%v); logs (%v):\n%s", phase, err, lerr, clipOut(string(logs)))
			if err != nil || phase != corev1.PodSucceeded {
				t.Fatalf("the agent did not succeed: phase %s, %v", phase, err)
			}
			line, err := netsec.LastJSONLine(string(logs), "probe", "agent")
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Shout struct {
					Text string `json:"text"`
					Host string `json:"host"`
				} `json:"shout"`
				Explode struct {
					Raised    bool   `json:"raised"`
					Type      string `json:"type"`
					Message   string `json:"message"`
					Traceback string `json:"traceback"`
					SandboxID string `json:"sandbox_id"`
				} `json:"explode"`
			}
			if err := json.Unmarshal([]byte(line), &out); err != nil {
				t.Fatal(err)
			}
			if out.Shout.Text != "HELLO" {
				t.Errorf("shout('hello') = %+v", out.Shout)
			}
			e := out.Explode
			switch {
			case !e.Raised:
				t.Errorf("explode did not raise RemoteToolError: %s", line)
			case e.Type != "RuntimeError" || !strings.Contains(e.Message, "exploded: on purpose"):
				t.Errorf("RemoteToolError %s: %s", e.Type, e.Message)
			case !strings.Contains(e.Traceback, "in explode") || !strings.Contains(e.Traceback, "tools/decorated.py"):
				t.Errorf("the traceback is not the remote one: %q", e.Traceback)
			}
			assertToolPodGone(ctx, t, out.Shout.Host)
			assertToolPodGone(ctx, t, e.SandboxID)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := clientset(ctx, t).CoreV1().Namespaces().Delete(ctx, agentNamespace, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete namespace %s: %v", agentNamespace, err)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}
