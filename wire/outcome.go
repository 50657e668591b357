package wire

// Outcomes of an execution, as the service and the runner log them and as
// the service counts them in sandbox_executions_total.
const (
	OutcomeOK        = "ok"         // ran and exited 0
	OutcomeErrorExit = "error_exit" // ran and exited non-zero
	OutcomeTimeout   = "timeout"    // killed at its deadline
	OutcomeOOM       = "oom"        // killed for memory
	OutcomeRejected  = "rejected"   // refused: bad request (4xx) or no capacity (503)
	OutcomeFailed    = "failed"     // could not be run (5xx)
	OutcomeCanceled  = "canceled"   // the client went away or the server stopped
)

// OutcomeRaised is a call whose function raised or returned no usable value.
const OutcomeRaised = "raised"

// Outcomes lists every outcome of an execution, for metrics that show each
// from the start.
var Outcomes = []string{OutcomeOK, OutcomeErrorExit, OutcomeTimeout, OutcomeOOM, OutcomeRejected, OutcomeFailed, OutcomeCanceled}

// CallOutcomes lists every outcome of a call, for metrics: an execution's,
// and OutcomeRaised.
var CallOutcomes = append(Outcomes[:len(Outcomes):len(Outcomes)], OutcomeRaised)

// Outcome names how a process ended: killed at its deadline, killed for
// memory, or by its exit code.
func (p Process) Outcome() string {
	switch {
	case p.TimedOut:
		return OutcomeTimeout
	case p.OOMKilled:
		return OutcomeOOM
	case p.ExitCode != 0:
		return OutcomeErrorExit
	}
	return OutcomeOK
}

// Outcome names the outcome of a call, for logs and metrics: its process's,
// except that a function that raised or returned nothing usable is
// OutcomeRaised unless the process was killed.
func (r CallResult) Outcome() string {
	if r.Error != nil && !r.TimedOut && !r.OOMKilled {
		return OutcomeRaised
	}
	return r.Process.Outcome()
}
