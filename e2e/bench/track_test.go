package bench

import (
	"testing"
	"time"
)

func TestUsedLeavesTheCountAtOnce(t *testing.T) {
	tr := &tracker{pods: map[string]*seen{
		"sandbox-a": {owner: "r1", ready: time.Now()},
		"sandbox-b": {owner: "r1", ready: time.Now()},
		"sandbox-c": {owner: "r1"},
	}, changed: make(chan struct{})}
	if warm, live := tr.counts("r1"); warm != 2 || live != 3 {
		t.Fatalf("before: warm %d live %d, want 2 and 3", warm, live)
	}
	// The response names a pod whose claim record the watch has not shown yet.
	tr.used([]Sample{{ID: "sandbox-a"}, {ID: "local-1"}})
	if warm, live := tr.counts("r1"); warm != 1 || live != 2 {
		t.Errorf("after: warm %d live %d, want 1 and 2", warm, live)
	}
}
