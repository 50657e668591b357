package exec

import (
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPreloadBeforeTheJob: the modules are imported before the job, in
// the snippet's own process, what they print is not the job's output, and
// one that does not exist is skipped and reported.
func TestPreloadBeforeTheJob(t *testing.T) {
	p := prestart(t, Options{Preload: []string{"json", "no_such_module_sandbox", "this"}})
	waitFor(t, p.Preloaded(), "preloaded")
	if got := p.Missing(); !slices.Equal(got, []string{"no_such_module_sandbox"}) {
		t.Errorf("Missing = %q, want the one that does not exist", got)
	}
	res, err := p.Run(t.Context(), Job{Code: "import sys; print('json' in sys.modules, 'this' in sys.modules)", Timeout: 10 * time.Second})
	if err != nil || res.Stdout != "True True\n" || res.Stderr != "" || res.ExitCode != 0 {
		t.Errorf("Run = %+v, %v; want both modules already imported and nothing else said (this prints the Zen of Python)", res, err)
	}
}

// TestPreloadAllThere: a preload that imports every module reports none
// missing; without a preload nothing is reported.
func TestPreloadAllThere(t *testing.T) {
	p := prestart(t, Options{Preload: []string{"json"}})
	waitFor(t, p.Preloaded(), "preloaded")
	if got := p.Missing(); len(got) != 0 {
		t.Errorf("Missing = %q, want none", got)
	}
	q := prestart(t, Options{})
	waitFor(t, q.Ready(), "ready")
	time.Sleep(100 * time.Millisecond)
	if isClosed(q.Preloaded()) {
		t.Error("Preloaded closed without a preload")
	}
}

// TestPreloadDoesNotHoldTheJob: the interpreter is ready before its
// preload ends, and a job that comes meanwhile stops the preload after the
// module under way: the next is not imported. The first module blocks
// until the job is on the socket, so the order is certain.
func TestPreloadDoesNotHoldTheJob(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "waitforjob.py"),
		fmt.Appendf(nil, "import select\nselect.select([%d], [], [])\n", ctlFD), 0o644); err != nil {
		t.Fatal(err)
	}
	p := prestart(t, Options{Python: pythonWithPath(t, dir), Preload: []string{"waitforjob", "json"}})
	waitFor(t, p.Ready(), "ready")
	time.Sleep(100 * time.Millisecond)
	if isClosed(p.Preloaded()) {
		t.Fatal("preloaded while its first module still waits")
	}
	res, err := p.Run(t.Context(), Job{Code: "import sys; print('waitforjob' in sys.modules, 'json' in sys.modules)", Timeout: 10 * time.Second})
	if err != nil || res.Stdout != "True False\n" {
		t.Errorf("Run = %+v, %v; want the module under way imported and the next one not", res, err)
	}
	if isClosed(p.Preloaded()) {
		t.Error("Preloaded closed for a preload the job cut short")
	}
}

// TestPreloadGate: each module waits for the gate, one ask at a time; a
// job that comes while the gate holds runs without the rest, and the gate
// is told to stop.
func TestPreloadGate(t *testing.T) {
	asked, release, stopped := make(chan struct{}, 8), make(chan struct{}), make(chan struct{}, 1)
	gate := heldGate(asked, stopped, release)
	p := prestart(t, Options{Preload: []string{"json", "this"}, NoWarmUp: true, PreloadGate: gate})
	waitFor(t, p.Ready(), "ready")
	waitFor(t, asked, "the first ask")
	time.Sleep(100 * time.Millisecond)
	if len(asked) != 0 || isClosed(p.Preloaded()) {
		t.Fatalf("asked %d more times, preloaded %v, while the gate held the first module", len(asked), isClosed(p.Preloaded()))
	}
	res, err := p.Run(t.Context(), Job{Code: "import sys; print('json' in sys.modules, 'this' in sys.modules)", Timeout: 10 * time.Second})
	if err != nil || res.Stdout != "False False\n" {
		t.Errorf("Run = %+v, %v; want neither module, the gate having held the first", res, err)
	}
	waitFor(t, stopped, "the gate told to stop")

	// Let go, each module is asked for in turn and imported.
	close(release)
	q := prestart(t, Options{Preload: []string{"json", "this"}, NoWarmUp: true, PreloadGate: gate})
	waitFor(t, q.Preloaded(), "preloaded")
	if len(asked) != 2 {
		t.Errorf("asked %d times for 2 modules", len(asked))
	}
}

// heldGate is a PreloadGate that says on asked that it was asked, and lets
// the step go once release is closed; told to stop first, it says so on
// stopped.
func heldGate(asked, stopped chan<- struct{}, release <-chan struct{}) func(<-chan struct{}) bool {
	return func(stop <-chan struct{}) bool {
		asked <- struct{}{}
		select {
		case <-release:
			return true
		case <-stop:
			stopped <- struct{}{}
			return false
		}
	}
}

// TestPreloadGoAheadWithTheJob: a go and the job's first bytes that reach
// python3 in one read (it was slow to wake: here, stopped) still run the
// job whole. python3 is stopped while it waits for its answer, the gate
// lets the next module go, the job is sent, and only then python3 goes on.
func TestPreloadGoAheadWithTheJob(t *testing.T) {
	asked, release := make(chan struct{}, 1), make(chan struct{})
	gate := heldGate(asked, make(chan struct{}, 1), release)
	p := prestart(t, Options{Preload: []string{"json", "csv"}, NoWarmUp: true, PreloadGate: gate})
	waitFor(t, asked, "the first ask")
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	close(release)
	time.Sleep(100 * time.Millisecond) // the go is written
	go func() {
		time.Sleep(200 * time.Millisecond) // the job is written
		syscall.Kill(p.Pid(), syscall.SIGCONT)
	}()
	res, err := p.Run(t.Context(), Job{Code: "import sys; print('whole', 'json' in sys.modules, __file__[0])", Timeout: 10 * time.Second})
	if err != nil || res.Stdout != "whole False /\n" || res.ExitCode != 0 {
		t.Errorf("Run = %+v, %v; want the job whole (its file's path too), and no module: the job came with the go", res, err)
	}
}

// TestPreloadRefusesCode: only module names reach the preamble.
func TestPreloadRefusesCode(t *testing.T) {
	for _, name := range []string{"os; print(1)", "a..b", "x')", ""} {
		if p, err := Prestart(Options{Dir: t.TempDir(), Preload: []string{name}}); err == nil {
			p.Close()
			t.Errorf("Prestart took preload %q", name)
		}
	}
	if _, err := ParsePreload("numpy, pandas ,,matplotlib.pyplot"); err != nil {
		t.Errorf("ParsePreload of a good list: %v", err)
	}
	if got, _ := ParsePreload(""); got != nil {
		t.Errorf("ParsePreload(\"\") = %q, want none", got)
	}
	if _, err := ParsePreload("numpy,import os"); err == nil {
		t.Error("ParsePreload took a name with a space")
	}
}

// pythonWithPath returns a python3 that runs the preamble with dir at the
// end of sys.path, which -I keeps out of reach of the environment: for
// modules that only a test needs.
func pythonWithPath(t *testing.T, dir string) string {
	t.Helper()
	python, err := findPython("", nil)
	if err != nil {
		t.Skip(err)
	}
	w := filepath.Join(t.TempDir(), "python3")
	script := fmt.Sprintf(`#!%s
import os, sys
a = sys.argv[1:]
i = a.index('-c') + 1
a[i] = 'import sys as _s; _s.path.append(%q); del _s\n' + a[i]
os.execv(%q, [%q] + a)
`, python, dir, python, python)
	if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// moduleList parses the repr of a sorted list of module names, as
// testdata/introspection/modules.py prints it.
func moduleList(s string) []string {
	s = strings.Trim(strings.TrimSpace(s), "[]")
	var names []string
	for _, n := range strings.Split(s, ", ") {
		names = append(names, strings.Trim(n, "'"))
	}
	return names
}

// preloadDiffers are the introspection snippets to which a preloaded
// interpreter shows something else than a fresh one, besides sys.modules
// (which TestPreloadedIsFresh checks exactly), and why; docs/runner.md
// lists them.
var preloadDiffers = map[string]struct{ why, with string }{
	"path-importer-cache": {"the preloaded packages' directories are in sys.path_importer_cache", ""},
	"signals":             {"the C library's handler of signal 33 (SIGSETXID), set when numpy's OpenBLAS starts its threads", "numpy"},
}

// TestPreloadedIsFresh: what a snippet sees of a preloaded interpreter is
// what a fresh one shows it, but for the preloaded modules in sys.modules,
// exactly those that importing them and the warm-up steps import in a bare
// python3 (descriptors among the rest: the warm-up closes what it opens), and the
// differences listed in preloadDiffers. The preload is some of the
// standard library and, unless -short, those of DefaultPreload that this
// machine has, under the sandbox image's matplotlib settings.
func TestPreloadedIsFresh(t *testing.T) {
	env := preloadEnv(t)
	preload, extra := preloadedModules(t, env)
	t.Logf("preload %q adds %d modules", preload, len(extra))
	for _, tc := range introspection(t) {
		if tc.name == "process-age" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each preload is a second of one CPU
			fresh := runFreshWith(t, tc.code, Options{Env: env})
			warm := runWarmWith(t, tc.code, 0, Options{Env: env, Preload: preload})
			if tc.name == "modules" {
				want := append(moduleList(fresh.Stdout), extra...)
				slices.Sort(want)
				if more, less := setDiff(moduleList(warm.Stdout), slices.Compact(want)); more != nil || less != nil {
					t.Errorf("sys.modules is not fresh's and the preload's: also %q, lacks %q", more, less)
				}
				return
			}
			d, listed := preloadDiffers[tc.name]
			why := d.why
			listed = listed && (d.with == "" || slices.Contains(preload, d.with))
			switch {
			case fresh != warm && !listed:
				t.Errorf("fresh and preloaded differ:\nfresh: %+v\nwarm:  %+v", fresh, warm)
			case fresh == warm && listed:
				t.Errorf("listed as differing (%s), but fresh and preloaded agree: %+v", why, fresh)
			case listed:
				t.Logf("differs as listed (%s):\nfresh: %+v\nwarm:  %+v", why, fresh, warm)
			}
		})
	}
}

// preloadEnv is the runs' environment: the default, with a home and a
// matplotlib configuration of the test's own (as the image's MPLCONFIGDIR).
func preloadEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(DefaultEnv(home), "MPLBACKEND=Agg", "MPLCONFIGDIR="+filepath.Join(home, "matplotlib"))
}

// preloadedModules returns the preload the test uses and the modules that
// importing it, and its warm-up steps, add to a bare python3's sys.modules,
// under env.
func preloadedModules(t *testing.T, env []string) (preload, extra []string) {
	t.Helper()
	python, err := findPython("", env)
	if err != nil {
		t.Skip(err)
	}
	data, _ := ParsePreload(DefaultPreload)
	if testing.Short() {
		data = nil // a second of CPU per run
	}
	preload = []string{"json", "decimal"}
	for _, m := range data {
		if osexec.Command(python, "-I", "-c", "import "+m).Run() == nil {
			preload = append(preload, m)
		}
	}
	script := PreloadModulesScript(preload)
	var out []byte
	// Twice: the first builds matplotlib's font list, as the image's build
	// does, which imports what reading the fonts needs.
	for range 2 {
		cmd := osexec.Command(python, "-I", "-c", script)
		cmd.Env = env
		if out, err = cmd.Output(); err != nil {
			t.Fatalf("bare preload: %v", err)
		}
	}
	return preload, moduleList(string(out))
}

// setDiff returns what of a sorted list got is not in want, and what of
// want is not in got.
func setDiff(got, want []string) (more, less []string) {
	for _, g := range got {
		if _, found := slices.BinarySearch(want, g); !found {
			more = append(more, g)
		}
	}
	for _, w := range want {
		if _, found := slices.BinarySearch(got, w); !found {
			less = append(less, w)
		}
	}
	return more, less
}

// TestWarmUpSteps: the warm-up steps follow the preload's modules.
func TestWarmUpSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		preload []string
		want    []string
	}{
		{"none", nil, nil},
		{"no module with a warm-up", []string{"json", "numpy"}, nil},
		{"pandas", []string{"numpy", "pandas"}, []string{warmPandas, warmCollect}},
		{"pyplot", []string{"matplotlib.pyplot"}, []string{warmPyplot, warmCollect}},
		{"both: the plot through pandas", []string{"numpy", "pandas", "matplotlib.pyplot"}, []string{warmPandas, warmPandasPlot, warmCollect}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := warmUpSteps(tc.preload); !slices.Equal(got, tc.want) {
				t.Errorf("warmUpSteps(%q) = %q, want %q", tc.preload, got, tc.want)
			}
		})
	}
}

// TestWarmUpRuns: a preloaded interpreter has used what it imported before
// its job (the modules its first plot and frame import are there, the
// font file it drew with is closed again), and with NoWarmUp it has not.
// Unless -short, with this machine's data stack.
func TestWarmUpRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("a second or more of CPU per preload")
	}
	env := preloadEnv(t)
	python, err := findPython("", env)
	if err != nil {
		t.Skip(err)
	}
	const probe = `import os, sys
print([m in sys.modules for m in ('matplotlib.backends.backend_agg', 'pandas.io.formats.string', 'pandas.plotting._matplotlib')])
print(sorted(os.listdir('/proc/self/fd')))
`
	// Before any run: the end of each kills this process's other children.
	data, _ := ParsePreload(DefaultPreload)
	have := map[string]bool{}
	for _, m := range data {
		have[m] = osexec.Command(python, "-I", "-c", "import "+m).Run() == nil
	}
	// The descriptors must be those of an interpreter without a preload.
	bare := prestart(t, Options{Env: env})
	waitFor(t, bare.Ready(), "ready")
	res, err := bare.Run(t.Context(), Job{Code: probe, Timeout: 20 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	_, fds, _ := strings.Cut(res.Stdout, "\n")
	for _, tc := range []struct {
		name     string
		preload  string
		noWarmUp bool
		want     string
	}{
		{"data stack", DefaultPreload, false, "[True, True, True]"},
		{"data stack without the warm-up", DefaultPreload, true, "[False, False, False]"},
		{"pyplot alone", "matplotlib.pyplot", false, "[True, False, False]"},
		{"pandas alone", "pandas", false, "[False, True, False]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			preload, _ := ParsePreload(tc.preload)
			for _, m := range preload {
				if !have[m] {
					t.Skipf("no %s here", m)
				}
			}
			p := prestart(t, Options{Env: env, Preload: preload, NoWarmUp: tc.noWarmUp})
			waitFor(t, p.Preloaded(), "preloaded")
			res, err := p.Run(t.Context(), Job{Code: probe, Timeout: 20 * time.Second})
			if want := tc.want + "\n" + fds; err != nil || res.Stdout != want || res.Stderr != "" {
				t.Errorf("Run = %+v, %v; want stdout %q", res, err, want)
			}
		})
	}
}
