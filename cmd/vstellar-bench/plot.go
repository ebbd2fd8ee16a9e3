package main

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figures are drawn as SVG (gonum.org/v1/plot, vg/vgsvg): text stays
// text, so a plot is a few kilobytes and needs no font files to view. The
// font (Liberation Sans, which gonum measures the text with) is named,
// not embedded; a viewer without it substitutes one of its own.

const (
	plotWidth  = 6 * vg.Inch
	plotHeight = 3.6 * vg.Inch
)

// drawSVG writes f as an SVG document to w.
func (f *figure) drawSVG(w io.Writer) error {
	p, err := f.plot()
	if err != nil {
		return err
	}
	c := vgsvg.New(plotWidth, plotHeight)
	p.Draw(draw.New(c))
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("writing the SVG: %w", err)
	}
	return nil
}

func (f *figure) plot() (*plot.Plot, error) {
	if len(f.series) == 0 {
		return nil, fmt.Errorf("figure %s has no data", f.name)
	}
	p := plot.New()
	for _, ts := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		ts.Font.Variant = "Sans"
	}
	p.Title.Text = f.title
	p.X.Label.Text, p.Y.Label.Text = f.xLabel, f.yLabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	if f.bars {
		if err := f.addBars(p); err != nil {
			return nil, err
		}
		legendRoom(p, len(f.series), false)
		return p, nil
	}
	if f.logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
	}
	if f.logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
	}
	var all plotter.XYs
	entries := 0
	for i, s := range f.series {
		var pts plotter.XYs
		for j, x := range s.xs {
			y := s.ys[j]
			// A log axis has no place for zero or below; a window
			// without goodput is drawn on a linear one.
			if math.IsNaN(x) || math.IsNaN(y) || f.logX && x <= 0 || f.logY && y <= 0 {
				continue
			}
			pts = append(pts, plotter.XY{X: x, Y: y})
		}
		if len(pts) == 0 {
			continue
		}
		all = append(all, pts...)
		entries++
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("figure %s, %s: %w", f.name, s.name, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			p.Legend.Add(s.name, l)
			continue
		}
		p.Add(l)
		if len(pts) <= 40 { // marks on the points, unless a time series
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return nil, fmt.Errorf("figure %s, %s: %w", f.name, s.name, err)
			}
			sc.Color, sc.Shape = plotutil.Color(i), plotutil.Shape(i)
			p.Add(sc)
			p.Legend.Add(s.name, l, sc)
			continue
		}
		p.Legend.Add(s.name, l)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("figure %s has no point to draw", f.name)
	}
	// A log axis gets its range here: gonum widens a one-value range by
	// one either way, which can reach zero.
	if f.logX {
		p.X.Min, p.X.Max = logRange(all, func(xy plotter.XY) float64 { return xy.X })
	}
	if f.logY {
		p.Y.Min, p.Y.Max = logRange(all, func(xy plotter.XY) float64 { return xy.Y })
	}
	legendRoom(p, entries, f.logY)
	return p, nil
}

// legendRoom starts a linear y axis at zero (or below) and raises the top
// of the y axis so that the legend's entries, top right, sit above the
// data rather than on it.
func legendRoom(p *plot.Plot, entries int, logY bool) {
	frac := min(0.5, 0.08*float64(entries)) // of the plot's height
	if logY {
		lo, hi := math.Log(p.Y.Min), math.Log(p.Y.Max)
		p.Y.Max = math.Exp(lo + (hi-lo)/(1-frac))
		return
	}
	p.Y.Min = min(0, p.Y.Min)
	p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-frac)
}

// logRange is the positive values' extent, a little wider, for a log axis.
func logRange(pts plotter.XYs, v func(plotter.XY) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, xy := range pts {
		lo, hi = min(lo, v(xy)), max(hi, v(xy))
	}
	return lo / 1.25, hi * 1.25
}

// addBars draws a bar chart: a group per category, a bar per series.
func (f *figure) addBars(p *plot.Plot) error {
	n := len(f.series)
	slot := (plotWidth - vg.Inch) / vg.Length(max(1, len(f.categories)))
	w := min(vg.Points(18), 0.8*slot/vg.Length(n))
	for i, s := range f.series {
		vals := make(plotter.Values, len(f.categories))
		for j := range vals {
			if j < len(s.ys) && !math.IsNaN(s.ys[j]) {
				vals[j] = s.ys[j]
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return fmt.Errorf("figure %s, %s: %w", f.name, s.name, err)
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = (vg.Length(i) - vg.Length(n-1)/2) * w
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.NominalX(f.categories...)
	return nil
}

// logTicks labels a log axis at 1, 2 and 5 times the powers of ten
// within a few decades, at the powers of ten alone over more (gonum's
// LogTicks labels only powers of ten, which leaves a 1..16 axis with
// one label).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0 && hi >= lo) {
		return nil
	}
	steps := []float64{1, 2, 5}
	if hi/lo > 1e3 {
		steps = []float64{1}
	}
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, s := range steps {
			v := s * math.Pow(10, e)
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	if len(ts) < 2 {
		ts = []plot.Tick{
			{Value: lo, Label: strconv.FormatFloat(lo, 'g', 3, 64)},
			{Value: hi, Label: strconv.FormatFloat(hi, 'g', 3, 64)},
		}
	}
	return ts
}
