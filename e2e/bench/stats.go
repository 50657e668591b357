package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sandboxd/sandbox/internal/api"
)

// Sample is one measurement, as the raw samples file stores it.
type Sample struct {
	Phase  string  `json:"phase"`
	MS     float64 `json:"ms"`               // what the phase measures, in milliseconds
	Status int     `json:"status,omitempty"` // HTTP status (200, 503, ...; 0: no answer)
	OK     bool    `json:"ok"`               // a correct result (print(1) printed 1)
	ID     string  `json:"id,omitempty"`     // sandbox id, or the pod measured
	Sent   float64 `json:"sent,omitempty"`   // wall clock (Unix seconds) the request left
	Done   float64 `json:"done,omitempty"`   // wall clock its answer arrived
	Error  string  `json:"error,omitempty"`
	// Timing is where an execution's time went, in ms, as serve's
	// Server-Timing header and the answer's duration_ms ("run") say.
	Timing map[string]float64 `json:"timing,omitempty"`
}

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of xs,
// which it sorts; NaN for none.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	rank := int(math.Ceil(p / 100 * float64(len(xs))))
	return xs[min(max(rank, 1), len(xs))-1]
}

// Row is one line of the table.
type Row struct {
	What string
	MS   []float64 // latencies; empty for a row of figures only
	Rate string    // executions or pods per second, when the row has one
	Note string
}

// Table prints rows aligned: what, n, p50, p90, p99, rate, note.
func Table(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "what\tn\tp50 ms\tp90 ms\tp99 ms\trate\tnote\t")
	for _, r := range rows {
		n, p50, p90, p99 := "", "", "", ""
		if len(r.MS) > 0 {
			xs := slices.Clone(r.MS)
			n = fmt.Sprint(len(xs))
			p50, p90, p99 = ms(Percentile(xs, 50)), ms(Percentile(xs, 90)), ms(Percentile(xs, 99))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.What, n, p50, p90, p99, r.Rate, strings.ReplaceAll(r.Note, "\t", " "))
	}
	return tw.Flush()
}

// ms writes a latency with three significant figures or so: 15.6, 142, 7310.
func ms(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// The parts of a warm execution, each a difference of two figures of one
// sample: what the client saw, serve's total, its claim and its round trip
// to the runner, the runner's handler, the snippet's run.
var parts = []struct {
	what     string
	from, to string // the part is from minus to; "" is the client's ms, or nothing
}{
	{"client <-> serve: HTTP through the Service", "", "total"},
	{"serve: the claim", "claim", ""},
	{"serve: the rest of its work", "total", "claim+runner"},
	{"serve <-> runner: HTTP to the pod", "runner", "runner_job"},
	{"runner: its work around the run", "runner_job", "run"},
	{"the snippet's run (duration_ms)", "run", ""},
}

// Breakdown splits the correct samples' latencies into the parts above, a
// row each (rows without every figure are left out), so that a table shows
// where a warm execution's time goes.
func Breakdown(samples []Sample) []Row {
	get := func(s Sample, names string) (float64, bool) {
		if names == "" {
			return 0, true
		}
		sum := 0.0
		for n := range strings.SplitSeq(names, "+") {
			v, ok := s.Timing[n]
			if !ok {
				return 0, false
			}
			sum += v
		}
		return sum, true
	}
	var rows []Row
	for _, p := range parts {
		var xs []float64
		for _, s := range samples {
			if !s.OK {
				continue
			}
			from, ok1 := s.MS, true
			if p.from != "" {
				from, ok1 = get(s, p.from)
			}
			to, ok2 := get(s, p.to)
			if ok1 && ok2 {
				xs = append(xs, from-to)
			}
		}
		if len(xs) > 0 {
			rows = append(rows, Row{What: "  part: " + p.what, MS: xs})
		}
	}
	return rows
}

// podParts are the runner's own account of how the pod that ran an
// execution got warm, each from the runner's start (the pod's creation is
// not visible from inside it).
var podParts = []struct{ what, name string }{
	{"runner start to python3 waiting", api.TimingPodPython},
	{"runner start to its egress proven cut", api.TimingPodSealed},
	{"runner start to its first Ready answer", api.TimingPodReady},
	{"then warm, until its job came", api.TimingPodWarm},
}

// PodStartup gives a row for each of podParts over the correct samples
// that carry it, to set beside the create-to-Ready a watch sees.
func PodStartup(samples []Sample) []Row {
	var rows []Row
	for _, p := range podParts {
		if xs := timings(samples, p.name); len(xs) > 0 {
			rows = append(rows, Row{What: "  part: " + p.what, MS: xs})
		}
	}
	return rows
}

// timings lists one Server-Timing part (or "run", the duration_ms) of the
// correct samples that have it.
func timings(samples []Sample, name string) []float64 {
	var xs []float64
	for _, s := range samples {
		if v, ok := s.Timing[name]; ok && s.OK {
			xs = append(xs, v)
		}
	}
	return xs
}
