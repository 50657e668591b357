package pool

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sandboxd/sandbox/internal/api"
)

// The API server away.
//
// A claim needs no API call (claim.go), so while the API server is away a
// replica goes on handing out the Ready pods its informer knows. No new pod
// can become Ready meanwhile: the kubelet cannot report it, and the pool
// cannot create one. A request that finds no pod would wait the whole pool
// wait for nothing, so it is answered at once with a 503 that says why.
//
// The pool learns it from its own calls: a create, or the informer's list
// and watch, failing without an answer from the API server (an answer, even
// a refusal, means it is there). Any pod event or a create that succeeds
// means it is back.

// apiAwayAfter is how long failures must go on, with no success between,
// before the API server counts as away: a watch that ends and is made again
// at once is not an outage.
const apiAwayAfter = 3 * time.Second

// apiAwayRetry is the Retry-After of the 503: the informer tries again
// about as often.
const apiAwayRetry = 5 * time.Second

// apiFault is an unbroken run of failed calls to the API server.
type apiFault struct {
	since time.Time
	err   string
}

// noteAPIError records err from a call to the API server, when the server
// did not answer it.
func (p *Pool) noteAPIError(err error) {
	if err == nil || !unanswered(err) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.apiDown == nil {
		p.apiDown = &apiFault{since: time.Now()}
		// Wake the waiters once it counts as away: they get the 503 now
		// rather than at the end of their wait.
		time.AfterFunc(apiAwayAfter, func() {
			p.mu.Lock()
			p.broadcastLocked()
			p.mu.Unlock()
		})
		p.log.Warn("the API server does not answer", "err", err)
	}
	p.apiDown.err = err.Error()
	p.m.apiAway.Set(1)
}

// noteAPIOKLocked records that a call to the API server went through.
func (p *Pool) noteAPIOKLocked() {
	if p.apiDown == nil {
		return
	}
	p.log.Info("the API server answers again", "away", time.Since(p.apiDown.since).Round(time.Second))
	p.apiDown = nil
	p.m.apiAway.Set(0)
}

// apiAwayErrorLocked is the 503 for a request that finds no pod while the
// API server is away, or nil.
func (p *Pool) apiAwayErrorLocked(now time.Time) error {
	f := p.apiDown
	if f == nil || now.Sub(f.since) < apiAwayAfter {
		return nil
	}
	return &api.Error{Status: http.StatusServiceUnavailable, RetryAfter: apiAwayRetry, Msg: fmt.Sprintf(
		"no warm sandbox pod available, and none can start: the Kubernetes API server has not answered since %s (%s); try again shortly",
		f.since.UTC().Format(time.TimeOnly), f.err)}
}

// unanswered reports whether err means the API server gave no answer: not
// an API status (a refusal, a conflict, a throttle is an answer).
func unanswered(err error) bool {
	var st apierrors.APIStatus
	return !errors.As(err, &st)
}
