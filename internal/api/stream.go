package api

import (
	"bytes"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// Coalescing of a streamed answer's output (see EventStream). A snippet
// printing in a tight loop would otherwise cost an event per write: a
// client's parser, and serve relaying a runner, would do nothing else.
const (
	// StreamInterval is the least time between two sends of output. Output
	// after a quiet spell goes at once; more within the interval waits for
	// its end. 20 ms is far below what a person notices and below the 50 ms
	// a line may take from the snippet to the client, which on Kubernetes
	// crosses two streams (the runner's, then serve's); it bounds a
	// flood to 50 sends a second.
	StreamInterval = 20 * time.Millisecond
	// StreamChunk is how much waiting output is sent before the interval
	// is over: a flood still moves in pieces a client parses in one read
	// (the pipe is read 32 KiB at a time too), and a slow client holds
	// up no more than what the run's bounded head already keeps.
	StreamChunk = 32 << 10
	// streamLineWait is how long output that ends mid-line waits for the
	// rest of its line: Python's print writes a line's text and its end in
	// two writes, which this sends as one event.
	streamLineWait = 2 * time.Millisecond
)

// WantsEventStream reports whether a request's Accept header asks for
// server-sent events (text/event-stream, not with q=0).
func WantsEventStream(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		for r := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(r))
			if err != nil || mt != wire.EventStreamType {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q == 0 {
				continue
			}
			return true
		}
	}
	return false
}

// EventStream writes a run's answer as server-sent events (wire's stream
// events): its output as it comes, through Output, then its result or
// error. The answer begins (its status and headers are written) with its
// first event, so until the run has written something every answer can
// still be a plain one: a refusal, a 503 with Retry-After. Make it with
// NewEventStream, hand Output to the run, then call Stop and one of
// Finish, Fail or nothing (a plain answer written by the caller).
type EventStream struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	trailers []string

	mu      sync.Mutex
	pending [2]strings.Builder // stdout, stderr: not sent yet
	first   int                // the stream whose pending output came first; -1 with none
	stopped bool

	// Owned by whoever writes: the flusher until Stop, then the caller.
	started bool
	sent    [2]strings.Builder // what each stream's events carried
	err     error              // the first write that failed: the client is gone

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

// streamIndex maps wire.EventStdout and wire.EventStderr to pending's
// index.
func streamIndex(stream string) int {
	if stream == wire.EventStderr {
		return 1
	}
	return 0
}

var streamNames = [2]string{wire.EventStdout, wire.EventStderr}

// NewEventStream starts the stream's flusher. trailers name headers the
// caller sets only after the run (Server-Timing): declared when the
// answer begins, they are sent after the events.
func NewEventStream(w http.ResponseWriter, trailers ...string) *EventStream {
	s := &EventStream{w: w, rc: http.NewResponseController(w), trailers: trailers, first: -1,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go s.flusher() // owned: Stop waits for done
	return s
}

// Output is an exec.Job's Output: it queues text and returns at once.
func (s *EventStream) Output(stream, text string) {
	if text == "" {
		return
	}
	i := streamIndex(stream)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	if s.first < 0 {
		s.first = i
	}
	s.pending[i].WriteString(text)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// flusher sends waiting output: at once after a quiet spell of
// StreamInterval (give or take streamLineWait for the end of a line), else
// at the interval's end, or sooner once StreamChunk waits.
func (s *EventStream) flusher() {
	defer close(s.done)
	var last time.Time
	for {
		select {
		case <-s.wake:
		case <-s.quit:
			return
		}
		if !s.await(func() time.Time { return last.Add(StreamInterval) }) {
			return
		}
		lineBy := time.Now().Add(streamLineWait)
		if !s.await(func() time.Time {
			if s.lineEnded() {
				return time.Time{}
			}
			return lineBy
		}) {
			return
		}
		// A wake that found its output already sent sends nothing, and
		// must not delay the next output as if it had.
		if s.flush() {
			last = time.Now()
		}
	}
}

// await waits until the time until says (it is asked again at each new
// output), or StreamChunk waits; false when the stream stops meanwhile.
func (s *EventStream) await(until func() time.Time) bool {
	timer := time.NewTimer(0)
	<-timer.C
	for {
		wait := time.Until(until())
		if wait <= 0 || s.waiting() >= StreamChunk {
			return true
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		case <-s.quit:
			timer.Stop()
			return false
		}
	}
}

// waiting is how many bytes of output wait to be sent.
func (s *EventStream) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[0].Len() + s.pending[1].Len()
}

// lineEnded reports whether what waits ends lines (or nothing waits).
func (s *EventStream) lineEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.pending {
		if n := s.pending[i].Len(); n > 0 && s.pending[i].String()[n-1] != '\n' {
			return false
		}
	}
	return true
}

// flush sends what waits, one event per stream, the stream whose output
// came first first, and reports whether anything did.
func (s *EventStream) flush() bool {
	s.mu.Lock()
	var texts [2]string
	first := s.first
	for i := range texts {
		texts[i] = s.pending[i].String()
		s.pending[i].Reset()
	}
	s.first = -1
	s.mu.Unlock()
	if first < 0 {
		return false
	}
	for _, i := range []int{first, 1 - first} {
		if texts[i] != "" {
			s.eventJSON(streamNames[i], texts[i])
			s.sent[i].WriteString(texts[i])
		}
	}
	s.send()
	return true
}

// Stop ends the flusher, after which Output drops what it is given, and
// reports whether the answer has begun: if not, the caller may still
// answer plainly instead of calling Finish or Fail.
func (s *EventStream) Stop() (started bool) {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
	return s.started
}

// Finish sends the output still waiting, then what the result says beyond
// what the events carried, then the result. When the result's stdout (or
// stderr) goes on from what its events carried, the rest follows in one
// more event, so that the events concatenated are the result's text; when
// it does not (an answer made for a run whose output was lost), the
// result's whole text follows on a line of its own. It returns the error
// of the first write that failed. Call it after Stop.
func (s *EventStream) Finish(res wire.Result) error {
	s.flush()
	for i, text := range [2]string{res.Stdout, res.Stderr} {
		sent := s.sent[i].String()
		rest, ok := strings.CutPrefix(text, sent)
		if !ok {
			rest = text
			if sent != "" && !strings.HasSuffix(sent, "\n") && rest != "" {
				rest = "\n" + rest
			}
		}
		if rest != "" {
			s.eventJSON(streamNames[i], rest)
		}
	}
	s.eventJSON(wire.EventResult, res)
	s.send()
	return s.err
}

// Fail ends a begun answer with an error event: e's message and status.
// Call it after Stop.
func (s *EventStream) Fail(e *Error) error {
	s.flush()
	s.eventJSON(wire.EventError, wire.StreamError{Error: e.Msg, Status: e.Status})
	s.send()
	return s.err
}

// begin writes the answer's status and headers, once.
func (s *EventStream) begin() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", wire.EventStreamType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	// A proxy that buffers answers (nginx does by default) would hold the
	// events back until the end.
	h.Set("X-Accel-Buffering", "no")
	for _, t := range s.trailers {
		if h.Get(t) == "" {
			h.Add("Trailer", t)
		}
	}
	s.w.WriteHeader(http.StatusOK)
}

// eventJSON writes one event whose data is v's JSON, which is one line:
// JSON as wire.Marshal writes it escapes every line break.
func (s *EventStream) eventJSON(name string, v any) {
	if s.err != nil {
		return
	}
	data, err := wire.Marshal(v)
	if err != nil {
		data, _ = wire.Marshal(wire.StreamError{Error: err.Error(), Status: http.StatusInternalServerError})
		name = wire.EventError
	}
	s.begin()
	var b bytes.Buffer
	b.Grow(len(name) + len(data) + 16)
	b.WriteString("event: ")
	b.WriteString(name)
	b.WriteString("\ndata: ")
	b.Write(bytes.TrimSuffix(data, []byte("\n")))
	b.WriteString("\n\n")
	if _, err := s.w.Write(b.Bytes()); err != nil {
		s.err = err
	}
}

// send pushes what was written to the client.
func (s *EventStream) send() {
	if s.err != nil || !s.started {
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
}
