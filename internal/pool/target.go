package pool

import (
	"math"
	"time"
)

// How the warm target follows demand.
const (
	// DefaultMaxFactor sets --pool-max when it is not given: four times the
	// floor. The target never goes above it, whatever the demand, so a flood
	// of requests costs at most that many pods warm or starting per replica
	// (plus one pod per run in flight).
	DefaultMaxFactor = 4

	// rateWindow smooths the claim rate: the time constant of its
	// exponential decay. Ten seconds follows a burst within a second or two
	// (each claim adds 1/rateWindow at once) and forgets it within a minute.
	rateWindow = 10 * time.Second

	// shrinkHold is the window the target shrinks within: never below the
	// largest size wanted in the last shrinkHold, so traffic that comes in
	// waves finds its pods still warm at the next wave instead of paying a
	// start for each.
	shrinkHold = 30 * time.Second

	// initialStart is the pod start time assumed until the first pod of this
	// pool has been seen Ready: a second to schedule and start, and a second
	// or two until the policy engine has cut the new pod's egress and its
	// runner has proven it (see package seal).
	initialStart = 3 * time.Second

	// startWeight is the weight of the newest create-to-Ready observation
	// in the smoothed start time.
	startWeight = 0.3

	// retargetInterval is how often the target is re-evaluated without any
	// event, so that it can shrink when the claims stop.
	retargetInterval = time.Second
)

// Reasons the target moved: the label of sandbox_pool_target_changes_total.
const (
	reasonRate    = "claim_rate"       // grew: claims × start time
	reasonWaiting = "waiting_requests" // grew: requests are waiting for a pod
	reasonCapped  = "capped"           // grew to --pool-max; demand asked for more
	reasonIdle    = "demand_fell"      // shrank after shrinkHold below it
)

// targeter decides how many unclaimed pods (Ready or starting) the pool
// keeps. Each claim uses a pod and starts its replacement, which is Ready
// one start time later; at a claim rate λ about λ × start pods are always on
// their way (Little's law), so keeping floor + λ × start leaves the floor
// Ready for the next requests. Requests already waiting each need a pod
// now, whatever the rate says. The target grows at once, is clamped to
// [floor, max], and shrinks only to the largest size wanted within the last
// shrinkHold (the hysteresis: a pause shorter than that changes nothing).
// It holds no lock; the pool calls it under its own.
type targeter struct {
	floor, max int

	rate   float64   // claims per second, exponentially smoothed
	rateAt time.Time // when rate was last brought up to date
	start  float64   // seconds from create to Ready, smoothed

	target int
	// recent holds the sizes wanted within the last shrinkHold, as a
	// decreasing queue: recent[0] is the largest, each later one is newer
	// and smaller. It stays as short as the distinct sizes, at most
	// max-floor+1.
	recent []wantedAt
}

type wantedAt struct {
	at   time.Time
	size int
}

func newTargeter(floor, max int) *targeter {
	return &targeter{floor: floor, max: max, start: initialStart.Seconds(), target: floor}
}

// decay brings the rate forward to now.
func (c *targeter) decay(now time.Time) {
	if !c.rateAt.IsZero() && now.After(c.rateAt) {
		c.rate *= math.Exp(-now.Sub(c.rateAt).Seconds() / rateWindow.Seconds())
	}
	if c.rateAt.IsZero() || now.After(c.rateAt) {
		c.rateAt = now
	}
}

// claimed counts one request asking for a pod.
func (c *targeter) claimed(now time.Time) {
	c.decay(now)
	c.rate += 1 / rateWindow.Seconds()
}

// started records a pod's create-to-Ready time.
func (c *targeter) started(d time.Duration) {
	if d <= 0 {
		return
	}
	c.start += startWeight * (d.Seconds() - c.start)
}

// claimRate is the smoothed claim rate at now, per second.
func (c *targeter) claimRate(now time.Time) float64 {
	c.decay(now)
	return c.rate
}

// wanted is the size demand asks for now, before clamping, and what asks.
func (c *targeter) wanted(now time.Time, waiting int) (int, string) {
	byRate := int(math.Round(c.claimRate(now) * c.start))
	if waiting > byRate {
		return c.floor + waiting, reasonWaiting
	}
	return c.floor + byRate, reasonRate
}

// update re-evaluates the target at now with waiting requests waiting for
// a pod. It returns the target and, when it moved, why ("" otherwise).
func (c *targeter) update(now time.Time, waiting int) (int, string) {
	want, why := c.wanted(now, waiting)
	if want > c.max {
		want, why = c.max, reasonCapped
	}
	want = max(want, c.floor)

	for len(c.recent) > 0 && c.recent[len(c.recent)-1].size <= want {
		c.recent = c.recent[:len(c.recent)-1]
	}
	c.recent = append(c.recent, wantedAt{at: now, size: want})
	for len(c.recent) > 1 && now.Sub(c.recent[0].at) >= shrinkHold {
		c.recent = c.recent[1:]
	}

	switch held := c.recent[0].size; {
	case want > c.target:
		c.target = want
		return c.target, why
	case held < c.target:
		c.target = held
		return c.target, reasonIdle
	}
	return c.target, ""
}
