// Package verify is the engine of `sandbox verify`: it probes a live
// deployment from outside (the API server's view of pods, namespaces and
// RBAC) and from inside (Python snippets sent through the public API), with
// canaries and an unrestricted control pod of its own, and reports each
// check as PASS, FAIL or INCONCLUSIVE with its evidence.
package verify

import (
	"fmt"
	"strings"
	"time"
)

// Status is a check's verdict.
type Status string

// The verdicts. Skip is for checks that do not apply (tool calls before
// /v1/call exists, a stand-in address the user did not give): it is neither a
// pass nor a failure, and the report says why.
const (
	Pass         Status = "PASS"
	Fail         Status = "FAIL"
	Inconclusive Status = "INCONCLUSIVE"
	Skip         Status = "SKIP"
)

// Result is one check's outcome.
type Result struct {
	// Name is group/check, e.g. "network/canary-pod".
	Name string `json:"name"`
	// Property is the number of the property the check proves (the
	// property column of CHECKS.md, which verify --list prints); checks
	// that prove one property share it.
	Property string `json:"property,omitempty"`
	Status   Status `json:"status"`
	Evidence string `json:"evidence"`
	// DurationMS is the time spent on the step that produced the check; checks
	// decided by one snippet share it.
	DurationMS int64 `json:"duration_ms"`
}

// Group is the part of the name before the slash.
func (r Result) Group() string {
	g, _, _ := strings.Cut(r.Name, "/")
	return g
}

func result(name, property string, st Status, format string, args ...any) Result {
	return Result{Name: name, Property: property, Status: st, Evidence: fmt.Sprintf(format, args...)}
}

// Summary counts the verdicts.
type Summary struct {
	Pass         int   `json:"pass"`
	Fail         int   `json:"fail"`
	Inconclusive int   `json:"inconclusive"`
	Skip         int   `json:"skip"`
	Total        int   `json:"total"`
	DurationMS   int64 `json:"duration_ms"`
	// OK is the run's verdict: no FAIL, and no INCONCLUSIVE unless allowed.
	OK bool `json:"ok"`
	// AllowInconclusive records whether INCONCLUSIVE was allowed to pass.
	AllowInconclusive bool `json:"allow_inconclusive"`
}

// Report is everything a run found.
type Report struct {
	Checks  []Result `json:"checks"`
	Caveats []string `json:"caveats"`
	Summary Summary  `json:"summary"`
	// Target describes what was verified (namespace, URL, runtime, nodes).
	Target map[string]string `json:"target,omitempty"`
}

// Finish fills in the summary.
func (r *Report) Finish(d time.Duration, allowInconclusive bool) {
	s := Summary{Total: len(r.Checks), DurationMS: d.Milliseconds(), AllowInconclusive: allowInconclusive}
	for _, c := range r.Checks {
		switch c.Status {
		case Pass:
			s.Pass++
		case Fail:
			s.Fail++
		case Inconclusive:
			s.Inconclusive++
		case Skip:
			s.Skip++
		}
	}
	s.OK = s.Fail == 0 && (allowInconclusive || s.Inconclusive == 0)
	r.Summary = s
	if r.Caveats == nil {
		r.Caveats = []string{}
	}
}

// Check returns the named result, for tests and the e2e suite.
func (r *Report) Check(name string) (Result, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Result{}, false
}
