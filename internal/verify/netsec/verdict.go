package netsec

import (
	"fmt"
	"sort"
)

// Finding is what a control/sandbox pair of outcomes shows about a target the
// sandbox should not reach.
type Finding int

// The findings, from worst to best.
const (
	// SandboxBroken: the sandbox gave no usable outcome for the target (exec
	// error, empty or unparsable answer, target missing or skipped).
	SandboxBroken Finding = iota
	// SandboxReached: the sandbox completed a connection or got a reply.
	SandboxReached
	// ControlMissed: the sandbox did not reach the target, but neither did
	// the control, so the miss proves nothing.
	ControlMissed
	// Blocked: the control reached the target and the sandbox did not.
	Blocked
)

func (f Finding) String() string {
	switch f {
	case SandboxBroken:
		return "sandbox-broken"
	case SandboxReached:
		return "sandbox-reached"
	case ControlMissed:
		return "control-missed"
	case Blocked:
		return "blocked"
	}
	return fmt.Sprintf("finding(%d)", int(f))
}

// ControlOK says whether a control outcome counts as a reach: a completed
// connection, and for our canaries the token in the answer (so that a
// different service on the same address does not count), and for DNS a
// parsed reply, holding the canary's own address when Token names it (on
// kind a Service's UDP port was once seen answered NXDOMAIN by something
// else while its rules were being programmed).
func ControlOK(t Target, o *Outcome) bool {
	if o == nil || o.Skipped != "" || !o.Reached {
		return false
	}
	switch t.Kind {
	case DNSUDP, DNSTCP, Resolve:
		if t.Token != "" {
			return o.Answered && o.Token
		}
		return o.Answered
	case HTTP:
		if t.Token != "" {
			return o.Token
		}
		return o.Answered
	}
	return true
}

// CompareBlocked judges a target the sandbox must not reach. The order
// matters: a sandbox that reached is FAIL whatever the control saw, and a
// missing sandbox outcome is never taken as a block.
func CompareBlocked(t Target, control, sandbox *Outcome) Finding {
	switch {
	case sandbox == nil || sandbox.Skipped != "" || sandbox.Attempts == 0:
		return SandboxBroken
	case sandbox.Reached || sandbox.Answered || sandbox.Token:
		return SandboxReached
	case !ControlOK(t, control):
		return ControlMissed
	}
	return Blocked
}

// CompareAllowed judges a target the sandbox must reach (cluster DNS): it
// holds only when the sandbox itself got a full answer.
func CompareAllowed(sandbox *Outcome) bool {
	return sandbox != nil && sandbox.Skipped == "" && sandbox.Reached && sandbox.Answered
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
