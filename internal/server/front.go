package server

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/policy"
)

// admit names r's caller and lets it in under the policy, or says why
// not: 401 without a valid token, 403 for a caller the policy does not
// grant k, 429 over its quota, 503 when either cannot be judged now. done
// ends the request's share of the quota.
func (s *Server) admit(r *http.Request, a *audit, k policy.Kind) (done func(), _ *api.Error) {
	return s.enter(r, a, k, func(id auth.Identity) (policy.Caller, func(), error) { return s.opts.Gate.Admit(id, k) })
}

// authorize is admit without the quota: for /mcp, whose HTTP requests
// carry MCP messages (initialize, tools/list, ...) of which only each
// run_python call takes a share of the quota, as one /v1/execute does.
func (s *Server) authorize(r *http.Request, a *audit, k policy.Kind) (done func(), _ *api.Error) {
	return s.enter(r, a, k, func(id auth.Identity) (policy.Caller, func(), error) {
		c, err := s.opts.Gate.Grant(id, k)
		return c, func() {}, err
	})
}

// enter names r's caller, then asks the gate (Admit or Grant) to let it
// in, recording the caller and its grant in a and the decision in the
// metrics.
func (s *Server) enter(r *http.Request, a *audit, k policy.Kind, gate func(auth.Identity) (policy.Caller, func(), error)) (done func(), _ *api.Error) {
	id, err := s.opts.Auth.Authenticate(r.Context(), r)
	if err != nil {
		ae, ok := api.AsError(err)
		if !ok {
			ae = api.Errorf(http.StatusServiceUnavailable, "cannot check the caller now: %v", err)
		}
		s.metrics.decide(r.URL.Path, ae.Status, "")
		return nil, ae
	}
	a.caller = id
	if s.opts.Gate == nil {
		s.metrics.decide(r.URL.Path, http.StatusOK, "")
		return func() {}, nil
	}
	grant, done, err := gate(id)
	if err != nil {
		ae, _ := api.AsError(err)
		s.decideRefused(r.URL.Path, id, ae)
		return nil, ae
	}
	a.grant = &grant
	a.add(slog.LevelInfo, slog.String("grant", grant.Subject))
	s.metrics.decide(r.URL.Path, http.StatusOK, id.Namespace())
	return done, nil
}

// decideRefused counts the gate's refusal of id on path.
func (s *Server) decideRefused(path string, id auth.Identity, ae *api.Error) {
	ns := ""
	if ae.Status == http.StatusTooManyRequests {
		ns = id.Namespace() // a caller the policy names: a bounded set
	}
	s.metrics.decide(path, ae.Status, ns)
}

// allows refuses, once a request is read, what its caller's grant does
// not cover: the image of a call, a timeout over its bound.
func allows(a *audit, k policy.Kind, image string, timeout time.Duration) error {
	if a.grant == nil {
		return nil
	}
	return a.grant.Allows(a.caller, k, image, timeout)
}

// ptr is a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }
