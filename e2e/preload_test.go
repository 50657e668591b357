//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/runner"
)

// preloadDeadline bounds the wait for every warm pod to have preloaded:
// about a CPU-second each, one or two at a time as the node has a CPU to
// spare (the preload yields to a busy node).
const preloadDeadline = 2 * time.Minute

// preloadedCode says whether pandas and pyplot were imported before the
// snippet's own imports, and then does what a data agent does.
const preloadedCode = `import sys
before = all(m in sys.modules for m in ("numpy", "pandas", "matplotlib.pyplot"))
` + kindenv.DataSnippet + `print(before)
`

// TestWarmPodsPreload: serve's default preload reaches the snippet pods, a
// warm pod that has waited has the data stack imported before its job, and
// the data snippet runs in it without a word on stderr (the font list is
// in place).
func TestWarmPodsPreload(t *testing.T) {
	f := features.New("warm pods have the data stack imported before the job").
		Setup(withService).
		Assess("a settled warm pod has preloaded", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			t.Logf("every warm pod preloaded %s after the pools were there", waitPreloaded(ctx, t))
			res := execute(ctx, t, service(ctx), preloadedCode, 30)
			if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "True" || res.Stderr != "" {
				t.Errorf("data snippet on a settled warm pod: %+v; want the data stack imported before it, exit 0, no stderr", res)
			}
			t.Logf("data snippet: %d ms in the pod (%s)", res.DurationMS, res.SandboxID)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// waitPreloaded waits until every warm snippet pod's runner has logged its
// preload done, and returns how long that took.
func waitPreloaded(ctx context.Context, t *testing.T) time.Duration {
	t.Helper()
	cs := clientset(ctx, t)
	start := time.Now()
	var waiting []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, preloadDeadline, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()})
		if err != nil {
			return false, nil
		}
		waiting = waiting[:0]
		warm := 0
		for _, p := range l.Items {
			if !kube.IsReady(&p) || kube.IsClaimed(&p) {
				continue
			}
			warm++
			b, err := cs.CoreV1().Pods(kindenv.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil || !strings.Contains(string(b), runner.LogPreloaded) {
				waiting = append(waiting, p.Name)
			}
		}
		return warm > 0 && len(waiting) == 0, nil
	})
	if err != nil {
		t.Fatalf("warm pods not preloaded within %s: %v (still waiting: %v)", preloadDeadline, err, waiting)
	}
	return time.Since(start).Round(100 * time.Millisecond)
}
