package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
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
