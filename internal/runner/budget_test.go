//go:build linux

package runner

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/exec"
)

func TestProcBudget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    int
		pidsMax int64
		got     int
		err     string
	}{
		{"no pids limit keeps the default", 0, 0, exec.DefaultMaxProcs, ""},
		{"no pids limit keeps the flag", 300, 0, 300, ""},
		{"kind's podPidsLimit leaves the reserve", 0, 1024, 1024 - runnerReserve, ""},
		{"a lower flag stays", 200, 1024, 200, ""},
		{"a flag above the limit is lowered", 5000, 4096, 4096 - runnerReserve, ""},
		{"a limit too small for both is an error", 0, 100, 0, "raise the kubelet's podPidsLimit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := procBudget(tc.want, tc.pidsMax)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.got {
				t.Fatalf("procBudget(%d, %d) = %d, %v; want %d", tc.want, tc.pidsMax, got, err, tc.got)
			}
		})
	}
}

// TestPodPidsLimitLowersTheBudget: the pod's limit, which the container
// cannot read, bounds the snippet below it with the reserve kept.
func TestPodPidsLimitLowersTheBudget(t *testing.T) {
	s, err := New(Options{Listen: "127.0.0.1:0", PodPidsLimit: 200, Exec: exec.Options{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	if got, want := s.opts.Exec.MaxProcs, 200-runnerReserve; got != want {
		t.Fatalf("snippet RLIMIT_NPROC %d, want %d", got, want)
	}
}
