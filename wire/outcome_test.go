package wire

import "testing"

func TestCallOutcome(t *testing.T) {
	for _, tt := range []struct {
		r    CallResult
		want string
	}{
		{CallResult{}, OutcomeOK},
		{CallResult{Error: &CallError{Kind: CallRaised}, Process: Process{ExitCode: 1}}, OutcomeRaised},
		{CallResult{Process: Process{TimedOut: true, ExitCode: -1}}, OutcomeTimeout},
		{CallResult{Process: Process{OOMKilled: true, ExitCode: 137}}, OutcomeOOM},
		{CallResult{Process: Process{ExitCode: 3}}, OutcomeErrorExit},
	} {
		if got := tt.r.Outcome(); got != tt.want {
			t.Errorf("Outcome of %+v = %s, want %s", tt.r, got, tt.want)
		}
	}
}
