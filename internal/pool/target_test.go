package pool

import (
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/sandboxd/sandbox/internal/api"
)

// steady sends claims at rate per second for d on clk, updating c after each.
func steady(c *targeter, clk *testingclock.FakeClock, rate float64, d time.Duration) (target int, reasons []string) {
	step := time.Duration(float64(time.Second) / rate)
	for end := clk.Now().Add(d); clk.Now().Before(end); clk.Step(step) {
		c.claimed(clk.Now())
		t, why := c.update(clk.Now(), 0)
		target = t
		if why != "" {
			reasons = append(reasons, why)
		}
	}
	return target, reasons
}

func TestTargetStaysAtTheFloorWhenIdle(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	c := newTargeter(3, 12)
	for range 120 {
		clk.Step(time.Second)
		if got, why := c.update(clk.Now(), 0); got != 3 || why != "" {
			t.Fatalf("idle: target %d (%q), want 3", got, why)
		}
	}
	// A claim now and then is below what a start time can notice.
	target, _ := steady(c, clk, 0.05, 2*time.Minute)
	if target != 3 {
		t.Fatalf("one claim every 20 s: target %d, want the floor", target)
	}
}

// TestTargetFollowsClaimRateTimesStartTime: at a steady 2 claims/s with pods
// taking 3 s to start, about 6 pods are always on their way, so the target
// settles at the floor plus 6. Slower pods need more on their way.
func TestTargetFollowsClaimRateTimesStartTime(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	c := newTargeter(3, 20)
	target, reasons := steady(c, clk, 2, time.Minute)
	if target != 9 {
		t.Fatalf("2 claims/s × 3 s start: target %d, want 9", target)
	}
	for _, r := range reasons {
		if r != reasonRate {
			t.Fatalf("reasons %v, want only %s", reasons, reasonRate)
		}
	}
	for range 30 {
		c.started(5 * time.Second)
	}
	if target, _ = steady(c, clk, 2, time.Minute); target != 13 {
		t.Fatalf("2 claims/s × 5 s start: target %d, want 13", target)
	}
}

// TestTargetIsBounded: however many requests wait or claim, the target
// never goes above max, and a move the bound cut short says so.
func TestTargetIsBounded(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	c := newTargeter(3, 12)
	if got, why := c.update(clk.Now(), 10000); got != 12 || why != reasonCapped {
		t.Fatalf("10000 waiting: target %d (%q), want 12 (%s)", got, why, reasonCapped)
	}
	c = newTargeter(3, 12)
	if target, _ := steady(c, clk, 1000, 5*time.Second); target != 12 {
		t.Fatalf("1000 claims/s: target %d, want max 12", target)
	}
}

// TestTargetMeetsWaitingRequestsAtOnce: a burst on an idle pool, before any
// rate builds up: the requests waiting each get a pod started now.
func TestTargetMeetsWaitingRequestsAtOnce(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	c := newTargeter(3, 12)
	for range 10 {
		c.claimed(clk.Now())
	}
	got, why := c.update(clk.Now(), 7)
	if got != 10 || why != reasonWaiting {
		t.Fatalf("10 claims at once, 7 waiting: target %d (%q), want 10 (%s)", got, why, reasonWaiting)
	}
}

// TestTargetShrinksAfterTheHold: when the claims stop the target stays up
// for shrinkHold after the size it was last wanted at -- the next wave finds
// its pods warm -- then follows the decaying demand back to the floor.
func TestTargetShrinksAfterTheHold(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	c := newTargeter(3, 12)
	peak, _ := steady(c, clk, 2, time.Minute)
	if peak != 9 {
		t.Fatalf("peak %d, want 9", peak)
	}
	lastPeak := clk.Now()
	shrank := false
	for range 120 {
		clk.Step(time.Second)
		if want, _ := c.wanted(clk.Now(), 0); want >= peak {
			lastPeak = clk.Now()
		}
		got, why := c.update(clk.Now(), 0)
		if clk.Now().Sub(lastPeak) < shrinkHold && got != peak {
			t.Fatalf("%s after demand was last at %d: target %d, want it held", clk.Now().Sub(lastPeak), peak, got)
		}
		if why != "" {
			shrank = true
			if why != reasonIdle {
				t.Fatalf("shrank with reason %q", why)
			}
		}
	}
	if !shrank || c.target != 3 {
		t.Fatalf("two minutes idle: target %d, want the floor", c.target)
	}
}

// TestTargetHoldsThroughAPause: a wave, a pause shorter than the hold: the
// target is unchanged when the next wave starts.
func TestTargetHoldsThroughAPause(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	c := newTargeter(3, 12)
	steady(c, clk, 2, 30*time.Second)
	high := c.target
	if high <= 3 {
		t.Fatalf("target %d after a wave", high)
	}
	for range int(shrinkHold/time.Second) - 5 {
		clk.Step(time.Second)
		if got, _ := c.update(clk.Now(), 0); got != high {
			t.Fatalf("target %d during a pause shorter than the hold, want %d", got, high)
		}
	}
	c.claimed(clk.Now())
	if got, _ := c.update(clk.Now(), 0); got != high {
		t.Fatalf("target %d as the next wave starts, want %d", got, high)
	}
}

// TestStartEstimateFollowsObservations: the smoothed start time moves toward
// what pods take.
func TestStartEstimateFollowsObservations(t *testing.T) {
	c := newTargeter(3, 12)
	for range 30 {
		c.started(1500 * time.Millisecond)
	}
	if c.start < 1.45 || c.start > 1.55 {
		t.Fatalf("start estimate %.2f s after 30 observations of 1.5 s", c.start)
	}
	c.started(0) // nonsense is ignored
	if c.start < 1.45 {
		t.Fatalf("start estimate %.2f s after a zero observation", c.start)
	}
}

// TestPoolGrowsForWaitersAndShrinksBack: requests waiting on a pool with
// nothing Ready raise its target (and so its creates) at once; when demand
// is gone and the hold has passed, the surplus is deleted down to the floor.
// The pool's clock is fake; nothing waits for real time but the informer.
func TestPoolGrowsForWaitersAndShrinksBack(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	e := newEnv(t, nil, func(o *Options) {
		o.Clock = clk
		o.Wait = 300 * time.Millisecond
		o.Max = 8
	})
	e.autoReady.Store(false)
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := e.execute("x"); !errors.Is(err, api.ErrNoCapacity) {
				t.Errorf("err = %v, want api.ErrNoCapacity", err)
			}
		})
	}
	e.eventually("target grown for 4 waiting requests", func() bool {
		return testutil.ToFloat64(e.pool.m.target) == 7 && len(e.pods()) == 7
	})
	wg.Wait()
	if got := testutil.ToFloat64(e.pool.m.targetChanges.WithLabelValues(reasonWaiting)); got < 1 {
		t.Errorf("target changes for waiting requests = %v", got)
	}
	for _, p := range e.pods() {
		e.updatePod(p.Name, setReady)
	}
	e.waitWarm(7)

	// Demand is gone: after the hold the target returns to the floor and
	// the surplus goes.
	for range int(2 * shrinkHold / time.Second) {
		clk.Step(time.Second)
		time.Sleep(time.Millisecond) // let the loop see its tick
	}
	e.eventually("back to the floor", func() bool {
		clk.Step(time.Second)
		return testutil.ToFloat64(e.pool.m.target) == 3
	})
	e.waitWarm(3)
	if got := testutil.ToFloat64(e.pool.m.targetChanges.WithLabelValues(reasonIdle)); got < 1 {
		t.Errorf("target changes for demand that fell = %v", got)
	}
	if e.creates.Load() != 7 {
		t.Errorf("creates = %d, want 7: shrinking must not create", e.creates.Load())
	}
}

// TestPlanRemovesSurplusOldestFirst: with more idle pods than the target,
// a pass deletes the oldest and creates nothing.
func TestPlanRemovesSurplusOldestFirst(t *testing.T) {
	// A fake clock that never moves: no tick re-evaluates the target behind
	// the test's back.
	e := newEnv(t, nil, func(o *Options) { o.Clock = testingclock.NewFakeClock(time.Now()) }).start()
	e.waitWarm(3)
	e.pool.mu.Lock()
	e.pool.targeter.target = 5 // as if demand had grown it
	e.pool.mu.Unlock()
	e.pool.poke()
	e.waitWarm(5)
	e.pool.mu.Lock()
	e.pool.targeter.target = 3 // and fallen again
	e.pool.mu.Unlock()
	pods := e.pods()
	sort.Slice(pods, func(i, j int) bool {
		ti, tj := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return pods[i].Name < pods[j].Name
	})
	pl := e.pool.plan(time.Now())
	if len(pl.remove) != 2 || len(pl.create) != 0 {
		t.Fatalf("plan: remove %v, create %v; want 2 surplus removed, nothing created", pl.remove, pl.create)
	}
	for _, p := range pods[:2] {
		if _, ok := pl.remove[p.Name]; !ok {
			t.Errorf("oldest pod %s kept; removed %v", p.Name, pl.remove)
		}
	}
}
