package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/wire"
)

// The auth/* checks: serve names its callers and does for each only what
// the caller policy grants. Each refusal is set beside the same request
// from verify's own caller (granted everything), which must get through:
// a service that refused everyone would otherwise pass.
const (
	// limitedCaller is the shipped policy's second verify caller: snippets
	// only, one at a time.
	limitedCaller = "sandbox-verify-limited"
	// strangerCaller is a ServiceAccount no policy entry names: the
	// namespace's default one.
	strangerCaller = "default"
	// wrongAudience is an audience serve never takes.
	wrongAudience = "sandbox-verify-not-this-service"
	// quotaHold is how long the limited caller's first snippet holds its
	// one slot while the second is sent.
	quotaHold = 4 * time.Second
)

var authChecks = []string{
	"auth/anonymous-refused", "auth/wrong-audience-refused", "auth/ungranted-caller-refused",
	"auth/image-not-granted", "auth/quota-enforced",
}

// authProperty is the property the auth checks prove together.
const authProperty = "31"

// reply is one request's answer as the auth checks judge it.
type reply struct {
	status     int
	msg        string
	retryAfter string
}

func (r reply) String() string {
	s := fmt.Sprintf("HTTP %d", r.status)
	if r.msg != "" {
		s += fmt.Sprintf(" %q", clip(r.msg, 160))
	}
	if r.retryAfter != "" {
		s += " Retry-After " + r.retryAfter
	}
	return s
}

// postAs posts body to path with token ("" for none).
func (s *httpSandbox) postAs(ctx context.Context, token, path string, body any) (reply, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return reply{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, strings.NewReader(string(raw)))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb wire.ErrorBody
	_ = json.Unmarshal(b, &eb)
	return reply{status: resp.StatusCode, msg: eb.Error, retryAfter: resp.Header.Get("Retry-After")}, nil
}

// checkAuth runs the auth/* checks.
func checkAuth(ctx context.Context, e *env) []Result {
	h, ok := e.sb.(*httpSandbox)
	if !ok || h.token == "" {
		why := "verify has no caller of its own (no ServiceAccount " + e.opts.Namespace + "/" + e.opts.Caller + " to mint a token for)"
		return allAuth(Inconclusive, "%s, so no refusal can be set beside a granted request", why)
	}
	a := authRun{e: e, h: h, snippet: wire.ExecuteRequest{Code: "print(1)", TimeoutS: ptrTo(10)}}
	return []Result{
		a.refused(ctx, "auth/anonymous-refused", "", http.StatusUnauthorized),
		a.refused(ctx, "auth/wrong-audience-refused", a.mint(ctx, e.opts.Caller, wrongAudience), http.StatusUnauthorized),
		a.refused(ctx, "auth/ungranted-caller-refused", a.mint(ctx, strangerCaller, e.opts.Audience), http.StatusForbidden),
		a.imageNotGranted(ctx),
		a.quota(ctx),
	}
}

type authRun struct {
	e       *env
	h       *httpSandbox
	snippet wire.ExecuteRequest
	// mintErr is the first token verify could not mint.
	mintErr error
}

// mint is a token of the ServiceAccount sa of serve's namespace, or "" (and
// mintErr) when the API server does not give one.
func (a *authRun) mint(ctx context.Context, sa, audience string) string {
	tok, err := mintToken(ctx, a.e.cs, a.e.opts.Namespace, sa, audience, minTokenLife)
	if err == nil && tok == "" {
		err = fmt.Errorf("no ServiceAccount %s/%s", a.e.opts.Namespace, sa)
	}
	if err != nil && a.mintErr == nil {
		a.mintErr = err
	}
	return tok
}

// control posts the granted request: it must run.
func (a *authRun) control(ctx context.Context) (reply, bool) {
	r, err := a.h.postAs(ctx, a.h.token, "/v1/execute", a.snippet)
	return r, err == nil && r.status == http.StatusOK
}

// refused posts a snippet as token and wants status, beside the control.
func (a *authRun) refused(ctx context.Context, name, token string, want int) Result {
	if token == "" && name != "auth/anonymous-refused" {
		return result(name, authProperty, Inconclusive, "cannot mint the caller's token: %v", a.mintErr)
	}
	got, err := a.h.postAs(ctx, token, "/v1/execute", a.snippet)
	ctl, ok := a.control(ctx)
	switch {
	case err != nil:
		return result(name, authProperty, Inconclusive, "no answer: %v", err)
	case got.status == want:
		if !ok {
			return result(name, authProperty, Inconclusive, "refused (%s), but so was verify's granted caller (%s)", got, ctl)
		}
		return result(name, authProperty, Pass, "refused: %s; verify's granted caller ran it: %s", got, ctl)
	}
	return result(name, authProperty, Fail, "want HTTP %d, got %s (the service did not refuse the caller)", want, got)
}

// imageNotGranted: the limited caller (snippets only) calls a tool and must
// get 403 before anything starts; verify's caller sends the same call
// without a function and gets past the gate to the body's 400.
func (a *authRun) imageNotGranted(ctx context.Context) Result {
	const name = "auth/image-not-granted"
	st, _, err := a.e.probeCall(ctx)
	if err == nil && (st == http.StatusNotFound || st == http.StatusMethodNotAllowed) {
		return result(name, authProperty, Skip, "not applicable: the service has no /v1/call (HTTP %d)", st)
	}
	image := a.e.opts.ToolImage
	if image == "" {
		if dep, derr := a.e.cs.AppsV1().Deployments(a.e.opts.Namespace).Get(ctx, a.e.opts.Service, metav1.GetOptions{}); derr == nil {
			image = toolImageOf(dep)
		}
	}
	if image == "" {
		return result(name, authProperty, Inconclusive, "verify knows no tool image to ask for (name one with --tool-image)")
	}
	tok := a.mint(ctx, limitedCaller, a.e.opts.Audience)
	if tok == "" {
		return result(name, authProperty, Inconclusive, "cannot mint the limited caller's token: %v", a.mintErr)
	}
	got, err := a.h.postAs(ctx, tok, "/v1/call", wire.CallRequest{Image: image, Function: "builtins:len", Args: json.RawMessage(`[[]]`)})
	if err != nil {
		return result(name, authProperty, Inconclusive, "no answer: %v", err)
	}
	ctl, cerr := a.h.postAs(ctx, a.h.token, "/v1/call", wire.CallRequest{Image: image})
	switch {
	case got.status != http.StatusForbidden:
		return result(name, authProperty, Fail, "the caller granted no tool image called %s: %s", image, got)
	case cerr != nil || ctl.status != http.StatusBadRequest:
		return result(name, authProperty, Inconclusive, "refused (%s), but verify's granted caller did not get past the gate either (%s, %v)", got, ctl, cerr)
	}
	return result(name, authProperty, Pass, "refused: %s; verify's granted caller got past it to the body's check: %s", got, ctl)
}

// quota: the limited caller may have one request in flight; a second,
// sent while its first holds the slot, gets 429 with Retry-After, and one
// sent after it ends runs.
func (a *authRun) quota(ctx context.Context) Result {
	const name = "auth/quota-enforced"
	tok := a.mint(ctx, limitedCaller, a.e.opts.Audience)
	if tok == "" {
		return result(name, authProperty, Inconclusive, "cannot mint the limited caller's token: %v", a.mintErr)
	}
	hold := wire.ExecuteRequest{Code: fmt.Sprintf("import time; time.sleep(%d)", int(quotaHold/time.Second)), TimeoutS: ptrTo(20)}
	var first reply
	var firstErr error
	var wg sync.WaitGroup
	wg.Go(func() { first, firstErr = a.h.postAs(ctx, tok, "/v1/execute", hold) })
	// The first is admitted at once; its run takes quotaHold.
	time.Sleep(quotaHold / 4)
	second, err := a.h.postAs(ctx, tok, "/v1/execute", a.snippet)
	wg.Wait()
	after, aerr := a.h.postAs(ctx, tok, "/v1/execute", a.snippet)
	switch {
	case err != nil || firstErr != nil || aerr != nil:
		return result(name, authProperty, Inconclusive, "no answer: %v %v %v", firstErr, err, aerr)
	case first.status != http.StatusOK:
		return result(name, authProperty, Inconclusive, "the limited caller's first request did not run (%s): is it granted snippets, one at a time?", first)
	case second.status != http.StatusTooManyRequests:
		return result(name, authProperty, Fail, "a second request beside the limited caller's one in flight: %s, want 429", second)
	case second.retryAfter == "":
		return result(name, authProperty, Fail, "429 without Retry-After: %s", second)
	case after.status != http.StatusOK:
		return result(name, authProperty, Inconclusive, "throttled (%s), but the request after the first ended did not run either (%s)", second, after)
	}
	return result(name, authProperty, Pass, "beside its one request in flight: %s; after it: %s", second, after)
}

// allAuth is every auth check with one verdict.
func allAuth(st Status, format string, args ...any) []Result {
	var out []Result
	for _, c := range authChecks {
		out = append(out, result(c, authProperty, st, format, args...))
	}
	return out
}
