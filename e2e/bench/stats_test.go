package bench

import (
	"bytes"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
)

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v", got)
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	err := Table(&b, []Row{
		{What: "floor", MS: []float64{15.5, 15.9, 16.2}},
		{What: "serve peak memory", Note: "48 MiB, 51 MiB"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"p50 ms", "15.9", "16.2", "48 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestDrawLatencies draws a picture from a few samples of each phase: a PNG
// comes out.
func TestDrawLatencies(t *testing.T) {
	var s []Sample
	for i, phase := range plotted {
		for j := range 20 {
			s = append(s, Sample{Phase: phase, MS: float64(10*(i+1) + j), OK: true})
		}
	}
	path := t.TempDir() + "/bench.png"
	if err := drawLatencies(path, s, "a test"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("%s is not a PNG (%d bytes)", path, len(b))
	}
}

// TestDrawNothing: a run of phases that are not drawn (-phases compare)
// leaves no picture and says why, rather than failing on an empty log axis.
func TestDrawNothing(t *testing.T) {
	path := t.TempDir() + "/bench.png"
	s := []Sample{{Phase: "node-cpu-weights=default c1", MS: 20, OK: true}}
	if err := drawLatencies(path, s, "a test"); !errors.Is(err, errNothingToDraw) {
		t.Fatalf("got %v, want errNothingToDraw", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a picture was written: %v", err)
	}
}

func TestBreakdown(t *testing.T) {
	s := []Sample{
		{OK: true, MS: 50, Timing: map[string]float64{"total": 40, "claim": 1, "runner": 35, "runner_job": 20, "run": 12}},
		{OK: false, MS: 9000},
		{OK: true, MS: 60}, // an answer without Server-Timing: no parts
	}
	rows := Breakdown(s)
	want := []float64{10, 1, 4, 15, 8, 12}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, r := range rows {
		if len(r.MS) != 1 || r.MS[0] != want[i] {
			t.Errorf("%s: %v, want [%v]", r.What, r.MS, want[i])
		}
	}
}

func TestParseCompare(t *testing.T) {
	c, err := ParseCompare("SANDBOX_POD_CPU_REQUEST=10m,50m")
	if err != nil || c.Name != "SANDBOX_POD_CPU_REQUEST" || len(c.Values) != 2 || c.Values[0] != "10m" || c.Values[1] != "50m" {
		t.Fatalf("got %+v, %v", c, err)
	}
	for _, bad := range []string{"", "X", "X=1", "=1,2", "X=1,", "X=,2"} {
		if _, err := ParseCompare(bad); err == nil {
			t.Errorf("ParseCompare(%q) took it", bad)
		}
	}
}

func TestParseRounds(t *testing.T) {
	r, err := ParseRounds("1=40,3=200")
	if err != nil || len(r) != 2 || r[1] != 40 || r[3] != 200 {
		t.Fatalf("got %v, %v", r, err)
	}
	for _, bad := range []string{"", "3", "3=", "=5", "0=5", "3=0", "3=-1", "x=5", "3=5,3=6", "3=5,"} {
		if _, err := ParseRounds(bad); err == nil {
			t.Errorf("ParseRounds(%q) took it", bad)
		}
	}
}

func TestPodStartup(t *testing.T) {
	s := []Sample{
		{OK: true, Timing: map[string]float64{api.TimingPodPython: 60, api.TimingPodSealed: 900, api.TimingPodReady: 1100, api.TimingPodWarm: 3000}},
		{OK: false, Timing: map[string]float64{api.TimingPodPython: 1}},
		{OK: true, Timing: map[string]float64{api.TimingPodPython: 70}}, // a runner with nothing to prove
	}
	got := map[string][]float64{}
	for _, r := range PodStartup(s) {
		got[r.What] = r.MS
	}
	want := map[string][]float64{
		"  part: runner start to python3 waiting":        {60, 70},
		"  part: runner start to its egress proven cut":  {900},
		"  part: runner start to its first Ready answer": {1100},
		"  part: then warm, until its job came":          {3000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// TestOverloadRate counts correct answers after the skipped start over the
// time to the last answer, and every 503 wherever it falls.
func TestOverloadRate(t *testing.T) {
	start := time.Unix(1000, 0)
	s := []Sample{
		{OK: true, Done: 1005},               // in the skipped start
		{OK: true, Done: 1012},               // counted
		{Status: 503, Done: 1015},            // not correct, but a 503
		{OK: true, Done: 1020},               // counted, and the last
		{OK: false, Status: 500, Done: 1018}, // not correct
	}
	rate, span, busy, err := overloadRate(s, start, 10*time.Second)
	if err != nil || rate != 0.2 || span != 10 || busy != 1 {
		t.Fatalf("got rate %v over %v s, %d busy, %v; want 0.2 over 10 s, 1 busy", rate, span, busy, err)
	}
	if _, _, _, err := overloadRate(s[:1], start, 10*time.Second); err == nil {
		t.Error("no answer after the skip: want an error")
	}
}
