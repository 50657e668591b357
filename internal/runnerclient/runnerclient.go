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
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
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
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &Lost{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Header, &Refusal{Pod: pod, Status: resp.StatusCode, Msg: api.ErrorOf(resp)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return resp.Header, &Lost{Err: fmt.Errorf("read runner answer: %w", err)}
	}
	if int64(len(b)) > limit {
		return resp.Header, &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's answer is over %d bytes", pod, limit)}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return resp.Header, &api.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("%s: the runner's answer is not a result: %v", pod, err)}
	}
	return resp.Header, nil
}
