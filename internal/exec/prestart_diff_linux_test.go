package exec

import (
	"bytes"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// introspection reads the snippets in testdata/introspection, each of which
// looks at something that could tell how it was started. Each is run fresh,
// pre-started and by bare python3, and its stdout, stderr and exit code
// compared. The e2e suite runs them on kind too.
func introspection(t *testing.T) []struct{ name, code string } {
	t.Helper()
	files, err := filepath.Glob("testdata/introspection/*.py")
	if err != nil || len(files) == 0 {
		t.Fatalf("no introspection snippets: %v", err)
	}
	var cases []struct{ name, code string }
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, code string }{strings.TrimSuffix(filepath.Base(f), ".py"), string(b)})
	}
	return cases
}

// bareDiffers are the snippets to which bare `python3 -I -u -B FILE` shows
// something else, and why; docs/runner.md lists them. Every other snippet must
// see the same.
var bareDiffers = map[string]string{
	"argv-and-path":        "sys.path[0] is '' (the working directory), so that input files import",
	"import-an-input-file": "likewise",
	"process":              "the run's own limits, nice and oom_score_adj",
	"keyboard-interrupt":   "an uncaught KeyboardInterrupt exits 1, where python3 kills itself with SIGINT",
	"stack":                "the preamble's two frames lie below the snippet's",
}

// introspectionFiles are the input files of every case.
var introspectionFiles = []File{
	{Path: "helper.py", Content: []byte("X = 42\n")},
	{Path: "sub/data.csv", Content: []byte("a,b\n")},
}

// warmWait is how long the pre-started form of process-age waits between
// ready and its job; the others are given theirs once python3 waits.
const warmWait = 300 * time.Millisecond

// TestPrestartedIsFresh: a snippet cannot tell a pre-started interpreter
// from one started for it, except by the process's start time.
func TestPrestartedIsFresh(t *testing.T) {
	for _, tc := range introspection(t) {
		t.Run(tc.name, func(t *testing.T) {
			fresh := runFresh(t, tc.code)
			var wait time.Duration
			if tc.name == "process-age" {
				wait = warmWait
			}
			warm := runWarm(t, tc.code, wait)
			if tc.name == "process-age" {
				age, err := strconv.Atoi(strings.TrimSpace(warm.Stdout))
				if err != nil || age < int(warmWait/time.Millisecond)-20 {
					t.Errorf("pre-started process age %q ms, want at least the wait of %s", warm.Stdout, warmWait)
				}
				t.Logf("process age: fresh %s ms, pre-started %s ms", strings.TrimSpace(fresh.Stdout), strings.TrimSpace(warm.Stdout))
				return
			}
			if fresh != warm {
				t.Errorf("fresh and pre-started differ:\nfresh: %+v\nwarm:  %+v", fresh, warm)
			}
		})
	}
}

// TestFreshIsBare: what a snippet sees is what `python3 -I -u -B FILE`
// shows it, but for the differences listed in bareDiffers.
func TestFreshIsBare(t *testing.T) {
	for _, tc := range introspection(t) {
		if tc.name == "process-age" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			fresh := runFresh(t, tc.code)
			bare := runBare(t, tc.code)
			why, listed := bareDiffers[tc.name]
			switch {
			case fresh != bare && !listed:
				t.Errorf("fresh and bare python3 differ:\nfresh: %+v\nbare:  %+v", fresh, bare)
			case fresh == bare && listed:
				t.Errorf("listed as differing (%s), but fresh and bare python3 agree: %+v", why, fresh)
			case listed:
				t.Logf("differs as listed (%s):\nfresh: %+v\nbare:  %+v", why, fresh, bare)
			}
		})
	}
}

// seen is what a form of a run showed, made comparable across forms.
type seen struct {
	Stdout, Stderr string
	Exit           int
}

func runFresh(t *testing.T, code string) seen { return runFreshWith(t, code, Options{}) }

func runFreshWith(t *testing.T, code string, opts Options) seen {
	t.Helper()
	opts.Dir = t.TempDir()
	res, err := Run(t.Context(), Job{Code: code, Files: introspectionFiles, Timeout: 20 * time.Second}, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return normalize(opts.Dir, res.Stdout, res.Stderr, res.ExitCode)
}

func runWarm(t *testing.T, code string, wait time.Duration) seen {
	return runWarmWith(t, code, wait, Options{})
}

// runWarmWith gives code to an interpreter pre-started under opts once it
// waits and, with opts.Preload, once its preload is done, all of it there.
func runWarmWith(t *testing.T, code string, wait time.Duration, opts Options) seen {
	t.Helper()
	dir := t.TempDir()
	opts.Dir = dir
	p, err := Prestart(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ready := p.Ready()
	if len(opts.Preload) > 0 {
		ready = p.Preloaded()
	}
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after 20s")
	}
	if m := p.Missing(); len(m) > 0 {
		t.Fatalf("preload missing %q", m)
	}
	time.Sleep(wait)
	res, err := p.Run(t.Context(), Job{Code: code, Files: introspectionFiles, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return normalize(dir, res.Stdout, res.Stderr, res.ExitCode)
}

// runBare runs code as a file with python3's own file runner, in the same
// flags, directory, environment and files.
func runBare(t *testing.T, code string) seen {
	t.Helper()
	dir := t.TempDir()
	if err := writeFiles(dir, introspectionFiles, nil); err != nil {
		t.Fatal(err)
	}
	file, err := writeSnippet(code, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(file)
	env := DefaultEnv(dir)
	python, err := findPython("", env)
	if err != nil {
		t.Skip(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := &osexec.Cmd{Path: python, Args: []string{"python3", "-I", "-u", "-B", file}, Dir: dir, Env: env,
		Stdout: &stdout, Stderr: &stderr, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	err = cmd.Run()
	exit := 0
	var ee *osexec.ExitError
	switch {
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		exit = ws.ExitStatus()
		if ws.Signaled() {
			exit = 128 + int(ws.Signal())
		}
	case err != nil:
		t.Fatal(err)
	}
	return normalize(dir, stdout.String(), stderr.String(), exit)
}

var (
	snippetName = regexp.MustCompile(`sandbox-snippet-\d+\.py`)
	address     = regexp.MustCompile(`0x[0-9a-f]+`)
	pipeInode   = regexp.MustCompile(`pipe:\[\d+\]`)
)

// normalize replaces what differs between any two runs however started:
// the working directory, the code file's random name, addresses, pipe
// inodes, our pid (the snippet's parent).
func normalize(dir, stdout, stderr string, exit int) seen {
	pid := regexp.MustCompile(`\b` + strconv.Itoa(os.Getpid()) + `\b`)
	f := func(s string) string {
		s = strings.ReplaceAll(s, dir, "<DIR>")
		s = snippetName.ReplaceAllString(s, "sandbox-snippet-N.py")
		s = address.ReplaceAllString(s, "0x?")
		s = pipeInode.ReplaceAllString(s, "pipe:[?]")
		return pid.ReplaceAllString(s, "<PARENT>")
	}
	return seen{Stdout: f(stdout), Stderr: f(stderr), Exit: exit}
}
