package verify

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
	"time"
)

func sampleReport(allow bool) *Report {
	r := &Report{
		Checks: []Result{
			{Name: "lifecycle/no-reuse", Property: "1", Status: Pass, Evidence: "run 1 sandbox-a, run 2 sandbox-b", DurationMS: 2100},
			{Name: "network/canary-pod", Property: "13", Status: Fail, Evidence: "the sandbox reached 10.244.0.9:8080: " + strings.Repeat("word ", 40), DurationMS: 3000},
			{Name: "network/metadata-standin", Property: "13", Status: Inconclusive, Evidence: "neither reached", DurationMS: 3000},
			{Name: "toolcalls/egress", Property: "16,17", Status: Skip, Evidence: "not applicable", DurationMS: 5},
		},
		Caveats: []string{"DNS is an exfiltration channel."},
		Target:  map[string]string{"namespace": "sandbox"},
	}
	r.Finish(12*time.Second, allow)
	return r
}

func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		checks []Status
		allow  bool
		ok     bool
	}{
		{"all pass", []Status{Pass, Pass}, false, true},
		{"skip is not a failure", []Status{Pass, Skip}, false, true},
		{"fail", []Status{Pass, Fail}, true, false},
		{"inconclusive fails by default", []Status{Pass, Inconclusive}, false, false},
		{"inconclusive allowed", []Status{Pass, Inconclusive}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{}
			for _, s := range tc.checks {
				r.Checks = append(r.Checks, Result{Name: "g/c", Status: s})
			}
			r.Finish(time.Second, tc.allow)
			if r.Summary.OK != tc.ok {
				t.Errorf("OK = %v, want %v (%+v)", r.Summary.OK, tc.ok, r.Summary)
			}
		})
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport(false).Write(&b, FormatTable); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "STATUS        CHECK") {
		t.Errorf("header: %q", lines[0])
	}
	for _, want := range []string{
		"PASS          lifecycle/no-reuse           2.1s  run 1 sandbox-a, run 2 sandbox-b",
		"FAIL          network/canary-pod           3.0s  the sandbox reached 10.244.0.9:8080:",
		"INCONCLUSIVE  network/metadata-standin",
		"SKIP          toolcalls/egress",
		"Caveats (true of this deployment, not hidden):\n  - DNS is an exfiltration channel.",
		"4 checks: 1 PASS, 1 FAIL, 1 INCONCLUSIVE, 1 SKIP in 12.0s: NOT OK",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, l := range lines {
		if len(l) > 12+2+24+2+7+2+evidenceWidth+5 {
			t.Errorf("line not wrapped (%d): %q", len(l), l)
		}
	}
	// Wrapped evidence is kept whole.
	if got := strings.Count(out, "word"); got != 40 {
		t.Errorf("evidence lost words: %d of 40", got)
	}
}

func TestJSON(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport(false).Write(&b, FormatJSON); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Checks []struct {
			Name       string `json:"name"`
			Status     string `json:"status"`
			Evidence   string `json:"evidence"`
			DurationMS int64  `json:"duration_ms"`
			Property   string `json:"property"`
		} `json:"checks"`
		Caveats []string       `json:"caveats"`
		Summary map[string]any `json:"summary"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(got.Checks) != 4 || got.Checks[1].Status != "FAIL" || got.Checks[0].DurationMS != 2100 || got.Checks[3].Property != "16,17" {
		t.Errorf("checks: %+v", got.Checks)
	}
	if got.Summary["ok"] != false || got.Summary["fail"] != float64(1) || len(got.Caveats) != 1 {
		t.Errorf("summary %v caveats %v", got.Summary, got.Caveats)
	}
}

func TestJUnit(t *testing.T) {
	for _, allow := range []bool{false, true} {
		var b bytes.Buffer
		if err := sampleReport(allow).Write(&b, FormatJUnit); err != nil {
			t.Fatal(err)
		}
		var s junitSuites
		if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
			t.Fatalf("%v\n%s", err, b.String())
		}
		suite := s.Suites[0]
		wantFail, wantSkip := 2, 1
		if allow {
			wantFail, wantSkip = 1, 2
		}
		if suite.Tests != 4 || suite.Failures != wantFail || suite.Skipped != wantSkip {
			t.Errorf("allow=%v: tests %d failures %d skipped %d", allow, suite.Tests, suite.Failures, suite.Skipped)
		}
		if suite.Cases[1].Failure == nil || suite.Cases[1].Classname != "verify.network" {
			t.Errorf("FAIL case: %+v", suite.Cases[1])
		}
	}
	if err := sampleReport(false).Write(&bytes.Buffer{}, "yaml"); err == nil {
		t.Error("unknown format accepted")
	}
}
