//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/client-go/util/exec"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/wire"
)

// warmSkips are the introspection snippets not compared here, because the
// warm pod and a pod of the same image started for the comparison differ in
// them by construction: input files (the snippets send none here), the
// streams (containerd hands an exec FIFOs, the runner pipes), signal
// dispositions and identity (the exec comes through runc, the pod has its
// own uid), the run's limits, the process's age.
var warmSkips = map[string]bool{
	"cwd-and-files": true, "import-an-input-file": true, "descriptors": true, "signals": true,
	"identity": true, "process": true, "process-age": true,
}

// warmDiffers are the snippets that see something else than under bare
// python3, as exec's TestFreshIsBare lists them.
var warmDiffers = map[string]bool{"argv-and-path": true, "keyboard-interrupt": true, "stack": true}

// preloadMayDiffer are the snippets that may see what serve's default
// preload (exec.DefaultPreload) left, as docs/runner.md lists it: may, since
// a job that comes while the preload runs stops it. sys.modules is checked
// apart (preloadedModules).
var preloadMayDiffer = map[string]bool{"path-importer-cache": true}

// TestWarmRunLooksFresh sends each introspection snippet to /v1/execute,
// where a warm pod's pre-started python3 runs it, and runs it with bare
// `python3 -I -u -B FILE` in a pod of the same image, with the runner's
// environment: what the snippet prints, its stderr and its exit code must
// match but for the differences docs/runner.md lists.
func TestWarmRunLooksFresh(t *testing.T) {
	type warmKey struct{}
	f := features.New("a snippet in a warm pod sees what bare python3 would show it").
		Setup(withService).
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: envconf.RandomName("sandbox-e2e-fresh", 24)}}
			if err := r.Create(ctx, ns); err != nil {
				t.Fatalf("create namespace: %v", err)
			}
			t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), ns) })
			return context.WithValue(ctx, warmKey{}, createReady(ctx, t, cfg, sleeperPod(ns.Name, "fresh", Suite(ctx).Image, nil)))
		}).
		Assess("each snippet sees the same", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			pod := ctx.Value(warmKey{}).(*corev1.Pod)
			files, err := filepath.Glob("../internal/exec/testdata/introspection/*.py")
			if err != nil || len(files) == 0 {
				t.Fatalf("no introspection snippets: %v", err)
			}
			files = slices.DeleteFunc(files, func(f string) bool { return warmSkips[snippetOf(f)] })
			codes := make([]string, len(files))
			for i, file := range files {
				code, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				codes[i] = string(code)
			}
			warms := executeAll(ctx, service(ctx), codes, warmConcurrency)
			var asExpected []string
			for i, file := range files {
				name := snippetOf(file)
				w := <-warms[i]
				if w.err != nil {
					t.Fatalf("%s: %v", name, w.err)
				}
				res := w.res
				warm := normalizeSeen(kube.Workdir, res.Stdout, res.Stderr, res.ExitCode)
				bare := bareInPod(ctx, t, cfg, pod, codes[i])
				if name == "modules" {
					bare = bareAgain(ctx, t, cfg, pod, name, codes[i], bare)
					checkPreloaded(t, warm, bare, preloadedModules(ctx, t, cfg, pod))
					continue
				}
				if preloadMayDiffer[name] {
					t.Logf("%s: may differ by the preload:\nwarm: %+v\nbare: %+v", name, warm, bare)
					continue
				}
				if warm != bare && !warmDiffers[name] {
					bare = bareAgain(ctx, t, cfg, pod, name, codes[i], bare)
				}
				switch {
				case warm != bare && !warmDiffers[name]:
					t.Errorf("%s: warm pod and bare python3 differ:\nwarm: %+v\nbare: %+v", name, warm, bare)
				case warm == bare && warmDiffers[name]:
					t.Errorf("%s: listed as differing, but warm pod and bare python3 agree: %+v", name, warm)
				default:
					asExpected = append(asExpected, name)
				}
			}
			t.Logf("as expected: %s", strings.Join(asExpected, ", "))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// warmConcurrency is how many snippets TestWarmRunLooksFresh has in flight:
// the pool's target, so that they wait for no pod's start but their own.
const warmConcurrency = 3

func snippetOf(file string) string { return strings.TrimSuffix(filepath.Base(file), ".py") }

// warmResult is one snippet's answer from executeAll.
type warmResult struct {
	res wire.Result
	err error
}

// executeAll sends every code to /v1/execute, at most n at once, each
// asked again after a 503 until a minute and a half has passed; the i-th
// channel gets the i-th answer.
func executeAll(ctx context.Context, base string, codes []string, n int) []chan warmResult {
	out := make([]chan warmResult, len(codes))
	for i := range out {
		out[i] = make(chan warmResult, 1)
	}
	sem := make(chan struct{}, n)
	go func() {
		for i, code := range codes {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i] <- warmResult{err: ctx.Err()}
				continue
			}
			go func() {
				defer func() { <-sem }()
				out[i] <- executeRetrying(ctx, base, code)
			}()
		}
	}()
	return out
}

func executeRetrying(ctx context.Context, base, code string) warmResult {
	ctx, cancel := context.WithTimeout(ctx, 110*time.Second)
	defer cancel()
	for {
		r, err := post(ctx, base, code, 20)
		switch {
		case err != nil:
			return warmResult{err: err}
		case r.status() == http.StatusServiceUnavailable:
			select {
			case <-ctx.Done():
				return warmResult{err: fmt.Errorf("service stayed unavailable: %s", r.errorMsg())}
			case <-time.After(max(r.err.RetryAfter, 2*time.Second)):
			}
			continue
		case r.err != nil:
			return warmResult{err: fmt.Errorf("POST /v1/execute: %s", r)}
		}
		return warmResult{res: r.res}
	}
}

// checkPreloaded: the warm pod's sys.modules is bare python3's and some of
// what importing the preload adds, nothing else.
func checkPreloaded(t *testing.T, warm, bare seen, preloaded map[string]bool) {
	t.Helper()
	w, b := moduleSet(warm.Stdout), moduleSet(bare.Stdout)
	for m := range b {
		if !w[m] {
			t.Errorf("modules: the warm pod lacks %q, which bare python3 has", m)
		}
	}
	extra := 0
	for m := range w {
		if !b[m] && !preloaded[m] {
			t.Errorf("modules: the warm pod has %q, which neither bare python3 nor the preload imports", m)
		}
		if !b[m] {
			extra++
		}
	}
	t.Logf("modules: %d of the preload's %d there", extra, len(preloaded))
}

// bareAgain runs code with bare python3 a second time and returns that run,
// having logged it if it differs from the first. bare python3 is the
// reference, reached through the API server's exec, whose transport on a
// loaded node is not what TestWarmRunLooksFresh is about: a second bare run
// tells a reference that changed from a warm pod that differs.
func bareAgain(ctx context.Context, t *testing.T, cfg *envconf.Config, pod *corev1.Pod, name, code string, first seen) seen {
	t.Helper()
	again := bareInPod(ctx, t, cfg, pod, code)
	if again != first {
		t.Logf("%s: two bare runs differ (the reference, not the warm pod):\nfirst:  %+v\nsecond: %+v", name, first, again)
	}
	return again
}

// preloadedModules are the modules that importing exec.DefaultPreload and
// running its warm-up add to bare python3's, in pod, with the runner's
// environment.
func preloadedModules(ctx context.Context, t *testing.T, cfg *envconf.Config, pod *corev1.Pod) map[string]bool {
	t.Helper()
	preload, err := exec.ParsePreload(exec.DefaultPreload)
	if err != nil {
		t.Fatal(err)
	}
	got := bareInPod(ctx, t, cfg, pod, exec.PreloadModulesScript(preload))
	if got.Exit != 0 {
		t.Fatalf("import the preload in %s: %+v", pod.Name, got)
	}
	return moduleSet(got.Stdout)
}

// moduleSet parses a printed sorted list of module names.
func moduleSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, n := range strings.Split(strings.Trim(strings.TrimSpace(s), "[]"), ", ") {
		set[strings.Trim(n, "'")] = true
	}
	return set
}

// seen is what a run showed, made comparable.
type seen struct {
	Stdout, Stderr string
	Exit           int
}

// bareInPod runs code in pod as a file with bare python3, in the runner's
// flags and environment (its default and the image's SANDBOX_SNIPPET_ENV),
// from a fresh working directory.
func bareInPod(ctx context.Context, t *testing.T, cfg *envconf.Config, pod *corev1.Pod, code string) seen {
	t.Helper()
	const dir, file = "/tmp/fresh", "/tmp/sandbox-snippet-1.py"
	env := strings.Join(exec.DefaultEnv(dir), " ")
	// The image's additions to the runner's environment are in the pod's
	// own SANDBOX_SNIPPET_ENV.
	script := "rm -rf " + dir + " && mkdir " + dir + " && cd " + dir + ` && printf %s "$1" > ` + file +
		` && exec env -i ` + env + ` $(printf %s "$SANDBOX_SNIPPET_ENV" | tr , ' ') python3 -I -u -B ` + file + " < /dev/null"
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := cfg.Client().Resources().ExecInPod(ctx, pod.Namespace, pod.Name, "main", []string{"sh", "-c", script, "sh", code}, &stdout, &stderr)
	exit := 0
	var ee utilexec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitStatus()
	case err != nil:
		t.Fatalf("bare python3 in %s: %v: %s", pod.Name, err, stderr.String())
	}
	return normalizeSeen(dir, stdout.String(), stderr.String(), exit)
}

var (
	snippetName = regexp.MustCompile(`sandbox-snippet-\d+\.py`)
	address     = regexp.MustCompile(`0x[0-9a-f]+`)
)

// normalizeSeen replaces what differs between any two runs however started:
// the working directory, the code file's name, addresses.
func normalizeSeen(dir, stdout, stderr string, exit int) seen {
	f := func(s string) string {
		s = strings.ReplaceAll(s, dir, "<DIR>")
		s = snippetName.ReplaceAllString(s, "sandbox-snippet-N.py")
		return address.ReplaceAllString(s, "0x?")
	}
	return seen{Stdout: f(stdout), Stderr: f(stderr), Exit: exit}
}
