package policy

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
)

// Gate admits requests under the current policy and keeps each entry's
// quota: requests in flight and their rate.
type Gate struct {
	mu     sync.Mutex
	policy *Policy
	// why is what a caller is told while there is no policy: not loaded
	// yet, or its ConfigMap gone or invalid from the start.
	why    string
	quotas map[string]*quota

	// loaded is 1 while a policy applies; invalid counts edits refused.
	loaded  prometheus.Gauge
	invalid prometheus.Counter
}

// quota is one entry's bounds and their use.
type quota struct {
	inFlight int
	max      int
	rate     *rate.Limiter
}

// NewGate returns a gate that refuses everyone until Set gives it a policy.
func NewGate() *Gate {
	return &Gate{why: "the caller policy is not loaded yet", quotas: map[string]*quota{},
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_policy_loaded",
			Help: "1 while a caller policy applies; 0 while every caller is refused for want of one.",
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_policy_invalid_total",
			Help: "Versions of the caller policy ConfigMap refused as invalid (the policy before them stays).",
		}),
	}
}

// RegisterMetrics registers the gate's metrics on reg.
func (g *Gate) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{g.loaded, g.invalid} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register policy metrics: %w", err)
		}
	}
	return nil
}

// Set makes p the policy. The quotas of subjects it still names carry
// their use over, with its new bounds.
func (g *Gate) Set(p *Policy) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.policy = p
	g.loaded.Set(1)
	kept := map[string]*quota{}
	for _, c := range p.Callers {
		perSecond := rate.Limit(float64(c.RequestsPerMinute) / 60)
		burst := c.burst()
		q := g.quotas[c.Subject]
		if q == nil {
			q = &quota{rate: rate.NewLimiter(perSecond, burst)}
		} else {
			q.rate.SetLimit(perSecond)
			q.rate.SetBurst(burst)
		}
		q.max = c.MaxInFlight
		kept[c.Subject] = q
	}
	g.quotas = kept
}

// Clear drops the policy: every caller is refused with why, a 503.
func (g *Gate) Clear(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.policy, g.why = nil, why
	g.loaded.Set(0)
}

// explain changes what a caller is told while there is no policy, unless
// one arrived meanwhile.
func (g *Gate) explain(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.policy == nil {
		g.why = why
	}
}

// Admit lets id make a request of kind k, or says why not: 503 without a
// policy, 403 for a caller it does not name or grant k, 429 over the
// entry's quota. On success the caller's entry comes back, to judge the
// request's image and timeout once read, and done, which must be called
// when the request is over.
func (g *Gate) Admit(id auth.Identity, k Kind) (c Caller, done func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err = g.grant(id, k)
	if err != nil {
		return Caller{}, nil, err
	}
	q := g.quotas[c.Subject]
	if q.inFlight >= q.max {
		return Caller{}, nil, &api.Error{Status: http.StatusTooManyRequests, RetryAfter: time.Second,
			Msg: fmt.Sprintf("too many requests in flight for %s (at most %d)", c.Subject, q.max)}
	}
	r := q.rate.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return Caller{}, nil, &api.Error{Status: http.StatusTooManyRequests, RetryAfter: d,
			Msg: fmt.Sprintf("over the request rate of %s (%d a minute)", c.Subject, c.RequestsPerMinute)}
	}
	q.inFlight++
	var once sync.Once
	return c, func() {
		once.Do(func() {
			g.mu.Lock()
			q.inFlight--
			g.mu.Unlock()
		})
	}, nil
}

// Grant is Admit without the quota: it says whether id may make requests
// of kind k at all. A door that carries several requests in one (an MCP
// session's messages over /mcp) checks it per HTTP request, and Admits
// each request of k it carries.
func (g *Gate) Grant(id auth.Identity, k Kind) (Caller, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grant(id, k)
}

// grant is Grant with g.mu held.
func (g *Gate) grant(id auth.Identity, k Kind) (Caller, error) {
	if g.policy == nil {
		return Caller{}, &api.Error{Status: http.StatusServiceUnavailable, RetryAfter: 5 * time.Second, Msg: g.why}
	}
	c, ok := g.policy.For(id)
	if !ok {
		return Caller{}, api.Errorf(http.StatusForbidden, "%s is not a caller this service's policy names", id.User)
	}
	if err := c.Allows(id, k, "", 0); err != nil {
		return Caller{}, err
	}
	return c, nil
}
