//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// preloadSettle is how long the test leaves the pools idle, so that every
// warm pod has done its preload: about a CPU-second each at the snippet's
// idle priority.
const preloadSettle = 20 * time.Second

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
			select {
			case <-time.After(preloadSettle):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
			res := execute(ctx, t, service(ctx), preloadedCode, 30)
			if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "True" || res.Stderr != "" {
				t.Errorf("data snippet on a settled warm pod: %+v; want the data stack imported before it, exit 0, no stderr", res)
			}
			t.Logf("data snippet: %d ms in the pod (%s)", res.DurationMS, res.SandboxID)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
