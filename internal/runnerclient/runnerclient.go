// Package runnerclient is serve's client of a pod's runner: it posts the one
// job or tool call a runner takes and reads its answer. The pool and the
// tool caller both send through it, so a runner's answer is read, bounded
// and classified in one place; what a broken exchange means (another pod,
// a dead pod, an overdue run) is theirs to decide.
package runnerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

// Slack is what a run may take beyond its own timeout before serve stops
// waiting for the runner: its kill, its reaping and its answer.
const Slack = 15 * time.Second

// Refusal is a runner's answer other than 200.
type Refusal struct {
	// Pod names the runner's pod in messages: "sandbox pod NAME".
	Pod    string
	Status int
	// Msg is the runner's {"error": ...}, or what else its body held.
	Msg string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s: runner answered %d: %s", r.Pod, r.Status, r.Msg)
}

// Unsealed reports whether the runner refused because it holds no current
// proof that its pod's egress is cut: nothing ran.
func (r *Refusal) Unsealed() bool {
	return r.Status == http.StatusServiceUnavailable && strings.HasPrefix(r.Msg, api.NotSealed)
}

// Answer is the refusal as serve answers its own client: a 4xx as the
// runner said it (the request was bad), anything else a 502 naming the pod.
func (r *Refusal) Answer() *api.Error {
	if r.Status >= 400 && r.Status < 500 {
		return &api.Error{Status: r.Status, Msg: r.Msg}
	}
	return &api.Error{Status: http.StatusBadGateway, Msg: r.Error()}
}

// Lost is an exchange that broke before the answer was read: the request
// could not be sent, or the answer not read to its end. Whether the job ran
// is not known from here.
type Lost struct{ Err error }

func (e *Lost) Error() string { return e.Err.Error() }
func (e *Lost) Unwrap() error { return e.Err }

// Post sends body (JSON) to path on the runner at addr (host:port) and
// decodes its 200 answer, at most limit bytes, into out; it returns the
// answer's header. Its errors: a *Refusal for an answer other than 200, a
// *Lost when the exchange broke, and a 502 *api.Error naming pod for an
// answer read whole that is over limit or not JSON of out's type.
func Post(ctx context.Context, hc *http.Client, addr, path, pod string, body []byte, limit int64, out any) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build runner request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	return read(hc, req, pod, limit, out, nil)
}

// PostStream is Post asking the runner for its output as it comes (server-
// sent events, see wire's stream events): output gets each piece, on the
// caller's goroutine, before PostStream returns the result into out. The
// header it returns has the answer's trailer (the runner's Server-Timing
// follows its events) added. Its errors are Post's, and one more: an error
// the runner met once its answer had begun (an error event) is the
// *api.Error serve answers, as Refusal.Answer makes it. A runner that
// answers with plain JSON (an older one) gives no output but the result's.
func PostStream(ctx context.Context, hc *http.Client, addr, path, pod string, body []byte, limit int64, out *wire.Result,
	output func(stream, text string)) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build runner request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", wire.EventStreamType)
	return read(hc, req, pod, limit, out, output)
}

// read sends req and reads the answer into out: plain JSON, or events
// when output is set and the runner streams.
func read(hc *http.Client, req *http.Request, pod string, limit int64, out any, output func(stream, text string)) (http.Header, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &Lost{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Header, &Refusal{Pod: pod, Status: resp.StatusCode, Msg: api.ErrorOf(resp)}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); output != nil && mt == wire.EventStreamType {
		err := readEvents(resp.Body, pod, limit, out, output)
		h := resp.Header.Clone()
		for k, v := range resp.Trailer {
			h[k] = v
		}
		return h, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return resp.Header, &Lost{Err: fmt.Errorf("read runner answer: %w", err)}
	}
	if int64(len(b)) > limit {
		return resp.Header, &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's answer is over %d bytes", pod, limit)}
	}
	if err := decodeAnswer(b, out); err != nil {
		if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 && !json.Valid(b) {
			// An answer delimited by the connection's close has no length
			// to check it against: a connection broken mid-answer (a pod
			// lost with its node) reads as a short body, and is a broken
			// exchange, not a runner that answered nonsense.
			return resp.Header, &Lost{Err: fmt.Errorf("read runner answer: the connection closed after %d bytes of an answer that is not whole: %w", len(b), err)}
		}
		return resp.Header, &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's answer is not a result: %v", pod, err)}
	}
	return resp.Header, nil
}

// answerKeys are the keys every runner writes in a result, an execution's
// or a call's (wire.Process's exit code, which both embed, never omitted):
// an answer without them is not one, whatever JSON it is.
var answerKeys = []string{"exit_code"}

// decodeAnswer decodes a runner's result into out, first checking that it
// is one: a JSON object with answerKeys (and a call's "result", which the
// runner writes even when it is null). JSON alone is not enough: "{}" or
// "null" decode into a zero result without an error, and serve would pass
// that on as a 200 that is not the run's or the tool's answer.
func decodeAnswer(b []byte, out any) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	if keys == nil {
		return errors.New("null, not a JSON object")
	}
	want := answerKeys
	if _, ok := out.(*wire.CallResult); ok {
		want = append(want[:len(want):len(want)], "result")
	}
	for _, k := range want {
		if _, ok := keys[k]; !ok {
			return fmt.Errorf("no %q in it: %.200s", k, b)
		}
	}
	return json.Unmarshal(b, out)
}

// readEvents reads a runner's events to the end of the answer (so that its
// trailer is read too), passing its output on and its result into out.
func readEvents(body io.Reader, pod string, limit int64, out any, output func(stream, text string)) error {
	er := wire.NewEventReader(body, int(limit))
	var result bool
	for {
		ev, err := er.Next()
		switch {
		case err == io.EOF && result:
			return nil
		case err == io.EOF:
			return &Lost{Err: errors.New("read runner answer: it ended before its result")}
		case errors.Is(err, wire.ErrEventTooLarge):
			return &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's answer is over %d bytes", pod, limit)}
		case err != nil:
			return &Lost{Err: fmt.Errorf("read runner answer: %w", err)}
		case result:
			continue // nothing follows a result; read to the end
		}
		switch ev.Name {
		case wire.EventStdout, wire.EventStderr:
			var text string
			if err := json.Unmarshal(ev.Data, &text); err != nil {
				return &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's %s event is not a string: %v", pod, ev.Name, err)}
			}
			output(ev.Name, text)
		case wire.EventResult:
			if err := decodeAnswer(ev.Data, out); err != nil {
				return &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's answer is not a result: %v", pod, err)}
			}
			result = true
		case wire.EventError:
			var se wire.StreamError
			if err := json.Unmarshal(ev.Data, &se); err != nil || se.Error == "" {
				return &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's error event is not an error: %.200s", pod, ev.Data)}
			}
			// The run began: whatever the status, this pod's one job is spent.
			return (&Refusal{Pod: pod, Status: se.Status, Msg: se.Error}).Answer()
		}
	}
}
