// Package client calls a sandbox service's HTTP API. Agents and tools in Go
// import it; `sandbox exec` is built on it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// maxResponse bounds how much of an answer the client reads (64 MiB): two
// streams of a few MiB each, even with JSON's worst escaping, fit easily,
// and a broken or hostile server cannot make the client buffer without end.
const maxResponse = 64 << 20

// Client calls one sandbox service. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	hc    *http.Client
	token TokenSource
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc. The default
// has no overall timeout: a run is bounded by its own timeout_s and the
// caller's context.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the service at baseURL, e.g. http://sandbox.sandbox.svc.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("sandbox url %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sandbox url %q: want http://host[:port] or https://host[:port]", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, hc: &http.Client{}, token: DefaultTokenSource()}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Error is a non-2xx answer from the service. A 401 or 403 comes as an
// *AuthError and a 429 as a *QuotaError, each of which errors.As also finds
// as an *Error.
type Error struct {
	// StatusCode is the HTTP status, e.g. 400 or 503.
	StatusCode int
	// Message is the service's {"error": ...}, or a description of the
	// body when it had none.
	Message string
	// RetryAfter is the Retry-After header, when the service sent one.
	RetryAfter time.Duration
	// RequestID is the X-Request-Id header: serve's name for the request
	// in its log.
	RequestID string
	// BrokeOff says the error ended a streamed answer that had begun
	// (ExecuteStream): the run began, and output may have come.
	BrokeOff bool
}

func (e *Error) Error() string {
	return fmt.Sprintf("sandbox service: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Temporary reports whether trying again later may succeed (503, 429).
func (e *Error) Temporary() bool {
	return e.StatusCode == http.StatusServiceUnavailable || e.StatusCode == http.StatusTooManyRequests
}

// Execute runs one snippet and returns its result. A snippet that fails is
// still a result (see Result.ExitCode, TimedOut); the error is for requests
// that did not run: an *AuthError, a *QuotaError or an *Error for a non-2xx
// answer, a token that could not be had, or a transport error.
func (c *Client) Execute(ctx context.Context, req wire.ExecuteRequest) (wire.Result, error) {
	body, err := wire.Marshal(req)
	if err != nil {
		return wire.Result{}, err
	}
	var res wire.Result
	if err := c.do(ctx, http.MethodPost, "/v1/execute", body, &res); err != nil {
		return wire.Result{}, err
	}
	return res, nil
}

// Ready asks /readyz whether the service can take an execution now.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil)
}

// request builds a request of the API, with the caller's token for /v1/
// paths.
func (c *Client) request(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	u := c.base.JoinPath(path).String()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	// Only the API asks who is calling; the operators' endpoints
	// (/readyz) get no token, which they do not need.
	if c.token != nil && strings.HasPrefix(path, "/v1/") {
		tok, err := c.token(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s %s: not sent: bearer token: %w", method, u, err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	return req, nil
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	u := req.URL.String()
	resp, err := c.hc.Do(req)
	if err != nil {
		return err // a *url.Error: it names the method and the URL
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, u, err)
	}
	if len(data) > maxResponse {
		return fmt.Errorf("%s %s: answer over %d bytes", method, u, maxResponse)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return responseError(resp, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: answer is not a result: %w", method, u, err)
	}
	return nil
}

// responseError builds the error of a non-2xx answer: an *AuthError, a
// *QuotaError, or else an *Error.
func responseError(resp *http.Response, data []byte) error {
	e := &Error{StatusCode: resp.StatusCode, RequestID: resp.Header.Get(requestIDHeader)}
	var eb wire.ErrorBody
	if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
		e.Message = eb.Error
	} else {
		// Not our service, or a proxy in between: show what came back.
		text := strings.TrimSpace(string(data))
		switch {
		case text == "":
			e.Message = "empty answer"
		case len(text) > 200:
			e.Message = "unexpected answer: " + text[:200] + "…"
		default:
			e.Message = "unexpected answer: " + text
		}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return classify(e)
}

// requestIDHeader is where the service names a request (X-Request-Id).
const requestIDHeader = "X-Request-Id"

// classify returns e as the error its status makes it: an *AuthError, a
// *QuotaError, or e itself.
func classify(e *Error) error {
	switch e.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return (*AuthError)(e)
	case http.StatusTooManyRequests:
		return (*QuotaError)(e)
	}
	return e
}

// AuthError is a 401 or a 403 answer. 401: the service did not take the
// caller's token (none, malformed, expired, or for another audience; the
// Message says which). 403: it does not let this caller do what it asked
// (the Message names the identity it saw). The same request fails the same
// way until the token or the service's policy changes. It has the fields of
// an *Error and unwraps to one.
type AuthError Error

func (e *AuthError) Error() string { return (*Error)(e).Error() }
func (e *AuthError) Unwrap() error { return (*Error)(e) }

// QuotaError is a 429 answer: the caller has too many requests in flight or
// sends them too fast. Nothing ran; RetryAfter says when to try again. It
// has the fields of an *Error and unwraps to one.
type QuotaError Error

func (e *QuotaError) Error() string { return (*Error)(e).Error() }
func (e *QuotaError) Unwrap() error { return (*Error)(e) }

// IsTemporary reports whether err is an *Error worth retrying later.
func IsTemporary(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Temporary()
}

// Call runs a tool function in a one-use pod of req.Image and returns the
// service's answer: the function's value in Result, or what it raised in
// Error. As with Execute, the error is for calls that did not run.
func (c *Client) Call(ctx context.Context, req wire.CallRequest) (wire.CallResult, error) {
	body, err := wire.Marshal(req)
	if err != nil {
		return wire.CallResult{}, err
	}
	var res wire.CallResult
	if err := c.do(ctx, http.MethodPost, "/v1/call", body, &res); err != nil {
		return wire.CallResult{}, err
	}
	return res, nil
}
