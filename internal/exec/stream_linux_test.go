package exec

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// recorder is a Job.Output that keeps what it got and when the first
// piece came.
type recorder struct {
	mu    sync.Mutex
	text  map[string]*strings.Builder
	first time.Time
	calls int
}

func newRecorder() *recorder {
	return &recorder{text: map[string]*strings.Builder{wire.EventStdout: {}, wire.EventStderr: {}}}
}

func (r *recorder) output(stream, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first.IsZero() {
		r.first = time.Now()
	}
	r.calls++
	r.text[stream].WriteString(text)
}

func (r *recorder) got(stream string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.text[stream].String()
}

// TestOutputStreamsAsItComes: a snippet that prints, sleeps a second and
// prints again has its first line handed out a second before Run returns,
// on stdout and stderr apart; what was handed out starts the result.
func TestOutputStreamsAsItComes(t *testing.T) {
	code := "import sys, time\nprint('one', flush=True)\nprint('err', file=sys.stderr, flush=True)\n" +
		"time.sleep(1)\nprint('two')\n"
	runs := map[string]func(t *testing.T) Options{
		"pre-started": func(t *testing.T) Options { return Options{Dir: t.TempDir()} },
		"isolated":    func(t *testing.T) Options { return Options{Sandbox: sandboxFor(t, 2_000_000_021)} },
	}
	for name, opts := range runs {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder()
			res, err := Run(t.Context(), Job{Code: code, Timeout: 10 * time.Second, Output: rec.output}, opts(t))
			ended := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != "one\ntwo\n" || res.Stderr != "err\n" {
				t.Fatalf("result stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			if rec.first.IsZero() || ended.Sub(rec.first) < 800*time.Millisecond {
				t.Errorf("first output handed out %s before the end, want about a second", ended.Sub(rec.first))
			}
			if out, errs := rec.got(wire.EventStdout), rec.got(wire.EventStderr); !strings.HasPrefix(res.Stdout, out) ||
				!strings.HasPrefix(out, "one\n") || errs != "err\n" {
				t.Errorf("streamed stdout %q stderr %q", out, errs)
			}
		})
	}
}

// TestOutputStreamsOnlyTheHead: past the head the result keeps, nothing
// more is handed out, however much the snippet prints, and what was handed
// out is the start of the result's stdout, marker and tail after it.
func TestOutputStreamsOnlyTheHead(t *testing.T) {
	rec := newRecorder()
	const max = 64 << 10
	code := "import sys\nfor i in range(20000):\n    print('line', i)\n"
	res := run(t, Job{Code: code, Output: rec.output}, Options{MaxOutput: max})
	out := rec.got(wire.EventStdout)
	if !res.StdoutTruncated || !strings.HasPrefix(res.Stdout, out) {
		t.Fatalf("truncated %v; streamed %d bytes, not the start of the result's %d", res.StdoutTruncated, len(out), len(res.Stdout))
	}
	// Measured as the head is fitted: by what it costs in JSON.
	if c := jsonCost([]byte(out)); c > max/2 || c < max/2-32 {
		t.Errorf("streamed %d bytes costing %d, want the head: %d less a line at most", len(out), c, max/2)
	}
}
