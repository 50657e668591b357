package pool

import "time"

// expectationTTL forgets a write the informer never reported, so that a lost
// watch event cannot freeze the pool's size for ever. It is long enough for
// any watch delay worth waiting for; the informer's resync re-runs the
// reconcile that notices the expiry.
const expectationTTL = 2 * time.Minute

// expectations records the pool's own creates and deletes that the informer
// has not shown yet. Without it a reconcile run between a create and its
// watch event counts the pod as missing and creates another (agent-sandbox's
// warm pool over-created about tenfold this way). It is guarded by Pool.mu.
type expectations struct {
	creates map[string]time.Time // pod name -> when the create was sent
	deletes map[string]time.Time // pod name -> when the delete was sent
}

func newExpectations() *expectations {
	return &expectations{creates: map[string]time.Time{}, deletes: map[string]time.Time{}}
}

// expectCreate is called before the create is sent (the pool names its pods,
// so it knows the name): the informer may report the pod before Create
// returns.
func (e *expectations) expectCreate(name string, now time.Time) { e.creates[name] = now }

// createFailed forgets a create the API server refused.
func (e *expectations) createFailed(name string) { delete(e.creates, name) }

// expectDelete marks a pod as going away: it no longer counts as supply even
// while the informer still lists it.
func (e *expectations) expectDelete(name string, now time.Time) { e.deletes[name] = now }

// deleteFailed forgets a delete that did not happen (other than NotFound).
func (e *expectations) deleteFailed(name string) { delete(e.deletes, name) }

// observed is called for every pod the informer reports as present.
func (e *expectations) observed(name string) { delete(e.creates, name) }

// observedGone is called when the informer reports a pod deleted.
func (e *expectations) observedGone(name string) {
	delete(e.creates, name)
	delete(e.deletes, name)
}

func (e *expectations) deleting(name string) bool {
	_, ok := e.deletes[name]
	return ok
}

// pendingCreates counts creates not yet seen, skipping names in seen (pods
// already in the informer's cache whose event handler has not run yet), and
// drops the expired ones.
func (e *expectations) pendingCreates(now time.Time, seen map[string]bool) int {
	n := 0
	for name, at := range e.creates {
		switch {
		case now.Sub(at) > expectationTTL:
			delete(e.creates, name)
		case !seen[name]:
			n++
		}
	}
	for name, at := range e.deletes {
		if now.Sub(at) > expectationTTL {
			delete(e.deletes, name)
		}
	}
	return n
}

// createNames lists the creates not yet seen (for the shutdown sweep).
func (e *expectations) createNames() []string {
	names := make([]string, 0, len(e.creates))
	for name := range e.creates {
		names = append(names, name)
	}
	return names
}
