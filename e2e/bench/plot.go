package bench

import (
	"errors"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotted are the phases drawn, in legend order: the latencies a client
// sees, beside the floor and what a user would do without the service.
var plotted = []string{"floor", "local", "warm c1", "warm c3", "warm c10", "burst", "overload", "refill", "kubectl run"}

// errNothingToDraw: none of the plotted phases ran (a run of -phases
// compare, say), and an empty log axis cannot be drawn.
var errNothingToDraw = errors.New("none of the drawn phases ran")

// drawLatencies draws each phase's latencies as a cumulative distribution
// (the share of requests answered within x ms) on a log scale, into a PNG.
func drawLatencies(path string, samples []Sample, subtitle string) error {
	p := plot.New()
	p.Title.Text = "sandbox on kind: latency distributions\n" + subtitle
	p.X.Label.Text = "milliseconds (log scale)"
	p.Y.Label.Text = "share of requests answered within"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Points(40)

	lines := 0
	for i, phase := range plotted {
		var xs []float64
		for _, s := range samples {
			if s.Phase == phase && s.MS > 0 {
				xs = append(xs, s.MS)
			}
		}
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		pts := make(plotter.XYs, 0, 2*len(xs))
		for j, x := range xs {
			// A step: the share jumps at each sample.
			pts = append(pts, plotter.XY{X: x, Y: float64(j) / float64(len(xs))}, plotter.XY{X: x, Y: float64(j+1) / float64(len(xs))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.LineStyle.Width = vg.Points(1.5)
		l.LineStyle.Color = plotutil.Color(i)
		if i >= len(plotutil.DefaultColors) {
			l.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(phase, l)
		lines++
	}
	if lines == 0 {
		return errNothingToDraw
	}
	p.Legend.ThumbnailWidth = vg.Points(20)
	p.Legend.TextStyle.Color = color.Black
	p.Legend.Padding = vg.Points(2)
	return p.Save(9*vg.Inch, 6*vg.Inch, path)
}
