package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sandboxd/sandbox/wire"
)

// answer is one POST /v1/execute as verify saw it: the raw status and body
// as well as the decoded result, because several checks judge the status
// (400 for a bad path) and not only the result.
type answer struct {
	Status  int
	Body    string
	Result  wire.Result
	Err     string // the error body's message on a non-2xx answer
	Elapsed time.Duration
}

// ok says whether the service ran the snippet and answered with a result.
func (a *answer) ok() bool { return a != nil && a.Status == http.StatusOK }

// describe is a short account for evidence.
func (a *answer) describe() string {
	if a == nil {
		return "no answer"
	}
	if !a.ok() {
		return fmt.Sprintf("HTTP %d %q after %s", a.Status, clip(firstNonEmpty(a.Err, a.Body), 200), a.Elapsed.Round(time.Millisecond))
	}
	r := a.Result
	return fmt.Sprintf("%s: exit %d, %d ms, timed_out=%v, oom_killed=%v, stdout %d B (truncated=%v), stderr %d B (truncated=%v)",
		r.SandboxID, r.ExitCode, r.DurationMS, r.TimedOut, r.OOMKilled, len(r.Stdout), r.StdoutTruncated,
		len(r.Stderr), r.StderrTruncated)
}

// sandboxAPI is the service's public API; tests fake it.
type sandboxAPI interface {
	// Execute posts the request; an error means no HTTP answer at all.
	Execute(ctx context.Context, req wire.ExecuteRequest) (*answer, error)
	// Get fetches a small document (/readyz, /metrics).
	Get(ctx context.Context, path string) (int, string, error)
}

type httpSandbox struct {
	base string
	hc   *http.Client
	// token is sent as the bearer token of every API request; "" sends none.
	token string
}

func newHTTPSandbox(base, token string) *httpSandbox {
	return &httpSandbox{base: strings.TrimRight(base, "/"), hc: &http.Client{}, token: token}
}

// authorize adds s's bearer token to req.
func (s *httpSandbox) authorize(req *http.Request) {
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
}

func (s *httpSandbox) Execute(ctx context.Context, req wire.ExecuteRequest) (*answer, error) {
	// A flood answer carries at most a few MiB of output.
	status, body, elapsed, err := s.post(ctx, "/v1/execute", req, 64<<20)
	if status == 0 {
		return nil, err
	}
	a := &answer{Status: status, Body: body, Elapsed: elapsed}
	if err != nil {
		return a, err
	}
	return a, decodeAnswer(a)
}

// post sends req as JSON to path and reads at most limit bytes of the
// answer. A zero status means there was no HTTP answer at all; an error with
// a status means the answer could not be read whole.
func (s *httpSandbox) post(ctx context.Context, path string, req any, limit int64) (int, string, time.Duration, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, "", 0, fmt.Errorf("encode request for %s: %w", path, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", 0, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	s.authorize(hreq)
	start := time.Now()
	resp, err := s.hc.Do(hreq)
	if err != nil {
		return 0, "", 0, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		err = fmt.Errorf("read answer of %s: %w", path, err)
	}
	return resp.StatusCode, string(raw), time.Since(start), err
}

func decodeAnswer(a *answer) error {
	if a.Status != http.StatusOK {
		a.Err = gjson.Get(a.Body, "error").String()
		return nil
	}
	if !gjson.Valid(a.Body) {
		return fmt.Errorf("HTTP 200 with a body that is not JSON: %q", clip(a.Body, 200))
	}
	for _, k := range []string{"sandbox_id", "exit_code", "stdout", "stderr"} {
		if !gjson.Get(a.Body, k).Exists() {
			return fmt.Errorf("HTTP 200 without %q: %q", k, clip(a.Body, 200))
		}
	}
	if err := json.Unmarshal([]byte(a.Body), &a.Result); err != nil {
		return fmt.Errorf("decode result: %w", err)
	}
	return nil
}

func (s *httpSandbox) Get(ctx context.Context, path string) (int, string, error) {
	return httpGet(ctx, s.hc, s.base, path)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// timeoutS is a request's timeout_s.
func timeoutS(n int) *int { return &n }
