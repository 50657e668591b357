package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/local"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/wire"
)

// streamServe is serve with the local backend on a real 127.0.0.1 port.
type streamServe struct {
	url     string
	backend *local.Backend
	client  *client.Client
}

func newStreamServe(t testing.TB) *streamServe {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	ctx, cancel := context.WithCancel(context.Background())
	backend, err := local.New(ctx, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Backend: backend, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
		backend.Close()
	})
	s := &streamServe{url: "http://" + addr.String(), backend: backend}
	if s.client, err = client.New(s.url); err != nil {
		t.Fatal(err)
	}
	return s
}

// streamed is what a streamed execution gave: each stream's text, when
// each event came, and the result.
type streamed struct {
	text   map[string]*strings.Builder
	times  []time.Time
	result wire.Result
	ended  time.Time
}

func (s *streamServe) stream(t *testing.T, req wire.ExecuteRequest) streamed {
	t.Helper()
	got := streamed{text: map[string]*strings.Builder{wire.EventStdout: {}, wire.EventStderr: {}}}
	res, err := s.client.ExecuteStream(t.Context(), req, func(stream, text string) {
		got.times = append(got.times, time.Now())
		got.text[stream].WriteString(text)
	})
	got.ended = time.Now()
	if err != nil {
		t.Fatal(err)
	}
	got.result = res
	return got
}

// comparable is a result without what differs from run to run.
func comparable(r wire.Result) wire.Result {
	r.SandboxID, r.RequestID, r.DurationMS, r.Usage = "", "", 0, wire.Usage{}
	return r
}

// TestStreamComesAsPrinted: the first line of a snippet that prints,
// sleeps a second and prints again reaches the client a second before the
// result; the events add up to the result's text.
func TestStreamComesAsPrinted(t *testing.T) {
	s := newStreamServe(t)
	got := s.stream(t, wire.ExecuteRequest{Code: "import sys, time\nprint('one', flush=True)\n" +
		"print('warn', file=sys.stderr, flush=True)\ntime.sleep(1)\nprint('two')\n"})
	if len(got.times) == 0 || got.ended.Sub(got.times[0]) < 800*time.Millisecond {
		t.Fatalf("events at %v, result at %v: want the first a second before the result", got.times, got.ended)
	}
	if out, errs := got.text[wire.EventStdout].String(), got.text[wire.EventStderr].String(); out != "one\ntwo\n" ||
		errs != "warn\n" || got.result.Stdout != out || got.result.Stderr != errs {
		t.Errorf("events stdout %q stderr %q, result %+v", out, errs, got.result)
	}
}

// TestStreamResultIsTheUnstreamedAnswer: for runs that end each way, the
// result event is the answer the same request gets unstreamed, and the
// events add up to its stdout and stderr.
func TestStreamResultIsTheUnstreamedAnswer(t *testing.T) {
	s := newStreamServe(t)
	one := 1
	cases := map[string]wire.ExecuteRequest{
		"exit code":  {Code: "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"},
		"exception":  {Code: "print('before')\nraise ValueError('boom')"},
		"timed out":  {Code: "import time\nprint('start', flush=True)\ntime.sleep(5)", TimeoutS: &one},
		"truncated":  {Code: "import sys\nsys.stdout.write('x' * (3 << 20))\nprint('end')"},
		"no output":  {Code: "pass"},
		"utf-8 cuts": {Code: "import sys\nfor i in range(2000):\n    sys.stdout.buffer.write('é€'.encode()[i % 5:] + b'\\xff')\n    sys.stdout.flush()"},
		"outputs":    {Code: "open('a.txt', 'w').write('A')\nprint('wrote')", Outputs: []string{"*.txt"}},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			plain, err := s.client.Execute(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			got := s.stream(t, req)
			if !reflectEqual(comparable(got.result), comparable(plain)) {
				t.Errorf("streamed result\n%+v\nunstreamed\n%+v", comparable(got.result), comparable(plain))
			}
			if out, errs := got.text[wire.EventStdout].String(), got.text[wire.EventStderr].String(); out != got.result.Stdout ||
				errs != got.result.Stderr {
				t.Errorf("events stdout %d bytes, stderr %q; result stdout %d bytes, stderr %q",
					len(out), errs, len(got.result.Stdout), got.result.Stderr)
			}
		})
	}
}

func reflectEqual(a, b wire.Result) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// rawEvents posts req asking for events and returns them as they are on
// the wire, with the answer's header and trailer.
func rawEvents(t *testing.T, url string, req wire.ExecuteRequest) ([]wire.Event, *http.Response) {
	t.Helper()
	body, _ := json.Marshal(req)
	hreq, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/execute", bytes.NewReader(body))
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []wire.Event
	er := wire.NewEventReader(resp.Body, 0)
	for {
		ev, err := er.Next()
		if err == io.EOF {
			return evs, resp
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}

// TestStreamCoalesces: a snippet that prints thousands of lines in a
// tight loop, flushing each, gets at most an event per api.StreamInterval
// (and per api.StreamChunk), not one per line.
func TestStreamCoalesces(t *testing.T) {
	s := newStreamServe(t)
	const lines = 4000
	start := time.Now()
	evs, resp := rawEvents(t, s.url, wire.ExecuteRequest{Code: "import time\nfor i in range(" + strconv.Itoa(lines) +
		"):\n    print(i, flush=True)\n    time.sleep(0.0002)\n"})
	took := time.Since(start)
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	var out strings.Builder
	n := 0
	for _, ev := range evs {
		if ev.Name == wire.EventStdout {
			n++
			var text string
			json.Unmarshal(ev.Data, &text)
			out.WriteString(text)
		}
	}
	// The run is within took; one more for the rest after the run.
	bound := int(took/api.StreamInterval) + out.Len()/api.StreamChunk + 2
	t.Logf("%d lines in %d stdout events over %s (bound %d)", lines, n, took, bound)
	// Uncoalesced, nearly every line would be an event of its own.
	if n > bound || n > lines/20 || n < 2 {
		t.Errorf("%d stdout events for %d lines over %s, want between 2 and %d", n, lines, took, min(bound, lines/20))
	}
	if want := lines * 3; out.Len() < want {
		t.Errorf("events carried %d bytes, want all %d lines", out.Len(), lines)
	}
	if last := evs[len(evs)-1]; last.Name != wire.EventResult {
		t.Errorf("last event %q, want result", last.Name)
	}
	if st := resp.Trailer.Get("Server-Timing"); !strings.Contains(st, "total;dur=") {
		t.Errorf("Server-Timing trailer %q, want the total", st)
	}
}

// TestStreamBoundsOutput: a flood of 100 MB is streamed no further than
// the head the result keeps; then come the marker and the tail, as the
// result has them, and the whole answer stays near the bound.
func TestStreamBoundsOutput(t *testing.T) {
	s := newStreamServe(t)
	evs, _ := rawEvents(t, s.url, wire.ExecuteRequest{Code: "import sys\nb = b'y' * 65536\n" +
		"for _ in range(1600):\n    sys.stdout.buffer.write(b)\n"})
	var out strings.Builder
	size := 0
	var res wire.Result
	for _, ev := range evs {
		size += len(ev.Data)
		switch ev.Name {
		case wire.EventStdout:
			var text string
			json.Unmarshal(ev.Data, &text)
			out.WriteString(text)
		case wire.EventResult:
			json.Unmarshal(ev.Data, &res)
		}
	}
	if !res.StdoutTruncated || out.String() != res.Stdout || !strings.Contains(res.Stdout, "bytes of stdout dropped here") {
		t.Errorf("truncated %v, events %d bytes, result stdout %d bytes", res.StdoutTruncated, out.Len(), len(res.Stdout))
	}
	// The events and the result each carry the kept megabyte once.
	if size > 2*(1<<20)+64<<10 {
		t.Errorf("the answer's events hold %d bytes of data, want about 2 MiB", size)
	}
}

// TestStreamDisconnectEndsTheRun: a client that goes away mid-run ends the
// run: its process tree (a child the snippet started too) is gone within
// seconds, and its slot is free.
func TestStreamDisconnectEndsTheRun(t *testing.T) {
	s := newStreamServe(t)
	marker := fmt.Sprintf("sandbox-stream-test-%d", time.Now().UnixNano())
	code := "import subprocess, sys, time\n" +
		"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '" + marker + "'])\n" +
		"print('started', flush=True)\ntime.sleep(300)\n"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, err := s.client.ExecuteStream(ctx, wire.ExecuteRequest{Code: code, TimeoutS: ptr(60)}, func(_, text string) {
			select {
			case got <- text:
			default:
			}
		})
		done <- err
	}()
	select {
	case text := <-got:
		if !strings.HasPrefix(text, "started") {
			t.Fatalf("first event %q", text)
		}
	case err := <-done:
		t.Fatalf("the stream ended before its first event: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20 s")
	}
	if pids := processesWith(t, marker); len(pids) == 0 {
		t.Fatal("the snippet's child is not running: the test would prove nothing")
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("ExecuteStream after its context ended = nil, want an error")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := processesWith(t, marker)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the client went away, the run's processes %v live on", pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for s.backend.Busy() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the run's slot is still busy")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// processesWith lists the processes whose command line holds marker.
func processesWith(t *testing.T, marker string) []int {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		if pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// BenchmarkStreamLineLatency measures how long a line takes from the
// snippet's print to the client on the local backend, through serve's
// streamed answer on a real 127.0.0.1 listener: each request prints ten
// lines 50 ms apart, each with the time it was printed (the same clock:
// one machine), and p50-ns and p90-ns are over all lines.
func BenchmarkStreamLineLatency(b *testing.B) {
	s := newStreamServe(b)
	req := wire.ExecuteRequest{Code: "import time\nfor _ in range(10):\n    print(time.time_ns(), flush=True)\n    time.sleep(0.05)\n"}
	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	for b.Loop() {
		_, err := s.client.ExecuteStream(context.Background(), req, func(stream, text string) {
			now := time.Now()
			for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
				ns, err := strconv.ParseInt(line, 10, 64)
				if err != nil {
					continue
				}
				mu.Lock()
				lat = append(lat, now.Sub(time.Unix(0, ns)))
				mu.Unlock()
			}
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no line came")
	}
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*9/10].Nanoseconds()), "p90-ns")
}
