package seal

import (
	"context"
	"sync"
	"time"
)

// Guard keeps a pod's proof current: it proves the seal until it holds, at
// RetryInterval, and then again every RecheckInterval, so that a seal lost
// later (a policy deleted, an engine stopped) shows too. Make it with
// NewGuard, run Run once, read Last or wait with Wait.
type Guard struct {
	prover  Prover
	onCheck func(Check) // called after every check whose verdict changed

	mu      sync.Mutex
	last    Check
	checked bool
	since   time.Time     // the last proof, or the guard's start
	changed chan struct{} // closed and replaced after every check
}

// NewGuard returns a Guard over p. onCheck, when not nil, hears each check
// whose verdict differs from the one before (the first one included), for a
// log line.
func NewGuard(p Prover, onCheck func(Check)) *Guard {
	return &Guard{prover: p, onCheck: onCheck, changed: make(chan struct{}), since: time.Now()}
}

// Run proves until ctx ends.
func (g *Guard) Run(ctx context.Context) {
	for {
		c := g.prover.Check(ctx)
		if ctx.Err() != nil {
			return
		}
		g.mu.Lock()
		flipped := !g.checked || g.last.Sealed != c.Sealed
		g.last, g.checked = c, true
		if c.Sealed {
			g.since = c.At
		}
		close(g.changed)
		g.changed = make(chan struct{})
		g.mu.Unlock()
		if flipped && g.onCheck != nil {
			g.onCheck(c)
		}
		next := RetryInterval
		if c.Sealed {
			next = RecheckInterval
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Last is the latest check; ok is false before the first one ended.
func (g *Guard) Last() (c Check, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last, g.checked
}

// UnprovenFor is how long the seal has gone unproven at now: 0 while the
// latest check proved it, else the time since the last proof (or since the
// guard was made).
func (g *Guard) UnprovenFor(now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.checked && g.last.Sealed {
		return 0
	}
	return now.Sub(g.since)
}

// Sealed reports whether the latest check proved the seal and is younger
// than MaxAge at now.
func (g *Guard) Sealed(now time.Time) bool {
	c, ok := g.Last()
	return ok && c.Sealed && now.Sub(c.At) < MaxAge
}

// Wait returns as soon as the seal is proven, or after max (or when ctx
// ends), with the latest check.
func (g *Guard) Wait(ctx context.Context, max time.Duration) (Check, bool) {
	t := time.NewTimer(max)
	defer t.Stop()
	for {
		g.mu.Lock()
		c, ok, changed := g.last, g.checked, g.changed
		g.mu.Unlock()
		if ok && c.Sealed && time.Since(c.At) < MaxAge {
			return c, true
		}
		select {
		case <-changed:
		case <-t.C:
			return c, false
		case <-ctx.Done():
			return c, false
		}
	}
}
