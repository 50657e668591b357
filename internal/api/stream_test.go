package api

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// eventWriter is a ResponseWriter that keeps each event written and when.
type eventWriter struct {
	mu     sync.Mutex
	header http.Header
	status int
	buf    strings.Builder
	events []string // each "name data"
	at     []time.Time
}

func newEventWriter() *eventWriter { return &eventWriter{header: http.Header{}} }

func (w *eventWriter) Header() http.Header { return w.header }
func (w *eventWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status = code
}
func (w *eventWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		s := w.buf.String()
		i := strings.Index(s, "\n\n")
		if i < 0 {
			break
		}
		ev := strings.Replace(strings.TrimPrefix(s[:i], "event: "), "\ndata: ", " ", 1)
		w.events = append(w.events, ev)
		w.at = append(w.at, time.Now())
		w.buf.Reset()
		w.buf.WriteString(s[i+2:])
	}
	return len(p), nil
}
func (w *eventWriter) Flush() {}

func (w *eventWriter) got() ([]string, []time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.events...), append([]time.Time(nil), w.at...)
}

// TestEventStreamTiming: output after a quiet spell goes at once, its line
// finished first; a flood goes at most once per StreamInterval, or per
// StreamChunk.
func TestEventStreamTiming(t *testing.T) {
	t.Run("at once, a line at a time", func(t *testing.T) {
		w := newEventWriter()
		s := NewEventStream(w)
		sent := time.Now()
		s.Output(wire.EventStdout, "1")
		time.Sleep(time.Millisecond / 2)
		s.Output(wire.EventStdout, "\n")
		time.Sleep(50 * time.Millisecond)
		s.Stop()
		evs, at := w.got()
		if len(evs) != 1 || evs[0] != `stdout "1\n"` || at[0].Sub(sent) > 15*time.Millisecond {
			t.Errorf("events %q %v after the output, want one line at once", evs, at[0].Sub(sent))
		}
	})
	t.Run("a flood", func(t *testing.T) {
		w := newEventWriter()
		s := NewEventStream(w)
		start := time.Now()
		for time.Since(start) < 300*time.Millisecond {
			s.Output(wire.EventStdout, "x\n")
			time.Sleep(200 * time.Microsecond)
		}
		s.Stop()
		evs, _ := w.got()
		if max := int(300*time.Millisecond/StreamInterval) + 2; len(evs) > max || len(evs) < 2 {
			t.Errorf("%d events for 300 ms of a flood, want at most %d", len(evs), max)
		}
	})
	t.Run("a chunk goes before the interval", func(t *testing.T) {
		w := newEventWriter()
		s := NewEventStream(w)
		s.Output(wire.EventStdout, "a\n") // sent at once: the interval starts
		time.Sleep(2 * time.Millisecond)
		big := strings.Repeat("y", StreamChunk) + "\n"
		sent := time.Now()
		s.Output(wire.EventStdout, big)
		time.Sleep(StreamInterval * 2)
		s.Stop()
		evs, at := w.got()
		if len(evs) != 2 || at[1].Sub(sent) > StreamInterval/2 {
			t.Errorf("%d events, the chunk %v after it was written", len(evs), at[1].Sub(sent))
		}
	})
}

// TestEventStreamEnds: Finish sends what the result says beyond the events,
// or all of it when it does not go on from them; Fail ends with an error
// event; Stop before any event leaves the answer to the caller.
func TestEventStreamEnds(t *testing.T) {
	res := func(out, errs string) wire.Result {
		return wire.Result{Process: wire.Process{Stdout: out, Stderr: errs}}
	}
	for _, tt := range []struct {
		name   string
		output []string // stream:text, before Stop
		end    func(s *EventStream) error
		want   []string
	}{
		{name: "the rest after the run", output: []string{"stdout:a\n"},
			end:  func(s *EventStream) error { return s.Finish(res("a\nb\n[marker]\nz\n", "timed out after 1s\n")) },
			want: []string{`stdout "a\n"`, `stdout "b\n[marker]\nz\n"`, `stderr "timed out after 1s\n"`, "result"}},
		{name: "a result that does not go on from the events", output: []string{"stdout:a"},
			end:  func(s *EventStream) error { return s.Finish(res("", "the output is lost\n")) },
			want: []string{`stdout "a"`, `stderr "the output is lost\n"`, "result"}},
		{name: "lost stdout follows on a line of its own", output: []string{"stdout:partial"},
			end:  func(s *EventStream) error { return s.Finish(res("other\n", "")) },
			want: []string{`stdout "partial"`, `stdout "\nother\n"`, "result"}},
		{name: "an error after events", output: []string{"stderr:e\n"},
			end:  func(s *EventStream) error { return s.Fail(Errorf(502, "pod died")) },
			want: []string{`stderr "e\n"`, `error {"error":"pod died","status":502}`}},
		{name: "no output, a result", end: func(s *EventStream) error { return s.Finish(res("", "")) },
			want: []string{"result"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newEventWriter()
			s := NewEventStream(w, ServerTiming)
			for _, o := range tt.output {
				stream, text, _ := strings.Cut(o, ":")
				s.Output(stream, text)
			}
			time.Sleep(5 * time.Millisecond)
			s.Stop()
			if err := tt.end(s); err != nil {
				t.Fatal(err)
			}
			evs, _ := w.got()
			for i := range evs {
				if strings.HasPrefix(evs[i], "result ") {
					evs[i] = "result"
				}
			}
			if strings.Join(evs, "|") != strings.Join(tt.want, "|") || w.status != 200 ||
				w.header.Get("Content-Type") != "text/event-stream" || w.header.Get("Trailer") != ServerTiming {
				t.Errorf("events %q, status %d, header %v; want %q", evs, w.status, w.header, tt.want)
			}
		})
	}
	t.Run("stopped before any event", func(t *testing.T) {
		w := newEventWriter()
		s := NewEventStream(w)
		if s.Stop() || w.status != 0 {
			t.Errorf("begun %v, status %d: want the answer left to the caller", s.Stop(), w.status)
		}
		s.Output(wire.EventStdout, "late") // dropped: never written
		if evs, _ := w.got(); len(evs) != 0 {
			t.Errorf("events %q after Stop", evs)
		}
	})
}

func TestWantsEventStream(t *testing.T) {
	for accept, want := range map[string]bool{
		"text/event-stream":                       true,
		"application/json, text/event-stream":     true,
		"Text/Event-Stream; charset=utf-8":        true,
		"text/event-stream;q=0, application/json": false,
		"application/json":                        false,
		"":                                        false,
		"*/*":                                     false,
	} {
		h := http.Header{}
		if accept != "" {
			h.Set("Accept", accept)
		}
		if got := WantsEventStream(h); got != want {
			t.Errorf("Accept %q: %v, want %v", accept, got, want)
		}
	}
}
