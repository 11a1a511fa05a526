package benchmark

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotBins is how many log-spaced render-time bins the GETs panel uses.
const plotBins = 16

// WritePlot draws the observation figure as a PNG: on the left, mean
// GETs per render against render time (log-spaced bins, both axes
// logarithmic); on the right, the cumulative distribution of detection
// latency (renders never seen finished are left out, so their curve
// stays below 1).
func WritePlot(w io.Writer, outcomes []Outcome) error {
	gets := logPlot("Observation cost by render time", "render time (s, log)", "GETs per render (mean per bin, log)", true)
	gets.Legend.Top, gets.Legend.Left = true, true

	cdf := logPlot("Detection latency (remote finish → local record)", "detection latency (s, log)", "fraction of renders detected", false)
	cdf.Y.Min, cdf.Y.Max = 0, 1
	cdf.Legend.Top, cdf.Legend.Left = false, false
	cdf.Legend.XOffs, cdf.Legend.YOffs = -vg.Millimeter, vg.Centimeter

	for i, o := range outcomes {
		binned, err := getsByRenderTime(o)
		if err != nil {
			return err
		}
		l, pts, err := plotter.NewLinePoints(binned)
		if err != nil {
			return fmt.Errorf("plot %s: %w", o.Strategy, err)
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		pts.Shape = plotutil.Shape(i)
		gets.Add(l, pts)
		gets.Legend.Add(o.Strategy, l, pts)

		c, err := plotter.NewLine(detectionCDF(o))
		if err != nil {
			return fmt.Errorf("plot %s: %w", o.Strategy, err)
		}
		c.Color, c.Dashes, c.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.5)
		cdf.Add(c)
		cdf.Legend.Add(o.Strategy, c)
	}

	img := vgimg.New(32*vg.Centimeter, 13*vg.Centimeter)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3,
		PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 5}
	plots := [][]*plot.Plot{{gets, cdf}}
	canvases := plot.Align(plots, t, dc)
	gets.Draw(canvases[0][0])
	cdf.Draw(canvases[0][1])
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// getsByRenderTime bins the renders on a log scale of render time and
// returns each non-empty bin's geometric centre and mean GETs.
func getsByRenderTime(o Outcome) (plotter.XYs, error) {
	if len(o.Renders) == 0 {
		return nil, fmt.Errorf("plot %s: no renders", o.Strategy)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range o.Renders {
		s := r.Time.Seconds()
		lo, hi = math.Min(lo, s), math.Max(hi, s)
	}
	lo, hi = math.Log(lo), math.Log(hi)+1e-9
	sum := make([]float64, plotBins)
	n := make([]int, plotBins)
	for _, r := range o.Renders {
		b := int(float64(plotBins) * (math.Log(r.Time.Seconds()) - lo) / (hi - lo))
		b = min(max(b, 0), plotBins-1)
		sum[b] += float64(r.GETs)
		n[b]++
	}
	var xy plotter.XYs
	for b := range plotBins {
		if n[b] == 0 {
			continue
		}
		centre := math.Exp(lo + (float64(b)+0.5)*(hi-lo)/plotBins)
		xy = append(xy, plotter.XY{X: centre, Y: sum[b] / float64(n[b])})
	}
	return xy, nil
}

// detectionCDF is the empirical distribution of the detected renders'
// latencies, as a step curve over all renders.
func detectionCDF(o Outcome) plotter.XYs {
	var ds []time.Duration
	for _, r := range o.Renders {
		if r.Detect != Never {
			ds = append(ds, r.Detect)
		}
	}
	slices.Sort(ds)
	total := float64(len(o.Renders))
	xy := make(plotter.XYs, 0, 2*len(ds))
	for i, d := range ds {
		x := math.Max(d.Seconds(), 1e-3)
		xy = append(xy, plotter.XY{X: x, Y: float64(i) / total}, plotter.XY{X: x, Y: float64(i+1) / total})
	}
	return xy
}

// CostPoint is one design on the cost–latency plot.
type CostPoint struct {
	Name    string
	Dollars float64
	P99     time.Duration
}

// WriteCostLatency draws cost per 1,000 renders against p99 detection
// latency, one labelled point per design (log x axis).
func WriteCostLatency(w io.Writer, pts []CostPoint) error {
	p := logPlot("Cost against detection latency, same renders", "p99 detection latency (s, log)", "$ per 1,000 renders (one record per invocation)", false)
	for i, c := range pts {
		if c.P99 == Never {
			continue
		}
		s, err := plotter.NewScatter(plotter.XYs{{X: math.Max(c.P99.Seconds(), 1e-3), Y: c.Dollars}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", c.Name, err)
		}
		s.Color, s.Shape, s.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(4)
		p.Add(s)
		p.Legend.Add(c.Name, s)
	}
	p.Legend.Top = true
	return writePNG(w, p, 24*vg.Centimeter, 14*vg.Centimeter)
}

// WriteGETsFloor draws genjobs' mean GETs per render against render time
// (log-spaced bins) and the floor, 1 + ⌈(T − q)/30 s⌉, as a line.
func WriteGETsFloor(w io.Writer, genjobs Outcome, queueFor time.Duration) error {
	binned, err := getsByRenderTime(genjobs)
	if err != nil {
		return err
	}
	p := logPlot("GETs per render against render time", "render time (s, log)", "GETs per render (log)", true)
	lo, hi := binned[0].X, binned[len(binned)-1].X
	var floor plotter.XYs
	for x := lo; x <= hi*1.0001; x *= 1.02 {
		floor = append(floor, plotter.XY{X: x, Y: FloorGETs(time.Duration(x*float64(time.Second)), queueFor)})
	}
	fl, err := plotter.NewLine(floor)
	if err != nil {
		return err
	}
	fl.Color, fl.Width = plotutil.Color(1), vg.Points(1.5)
	l, pts, err := plotter.NewLinePoints(binned)
	if err != nil {
		return err
	}
	l.Color, pts.Color = plotutil.Color(0), plotutil.Color(0)
	p.Add(fl, l, pts)
	p.Legend.Add("floor: 1 + ⌈(T − q)/30 s⌉", fl)
	p.Legend.Add(genjobs.Strategy+" (mean per bin)", l, pts)
	p.Legend.Top, p.Legend.Left = true, true
	return writePNG(w, p, 20*vg.Centimeter, 13*vg.Centimeter)
}

// logPlot is a gridded plot with a logarithmic x axis, and y axis if logY.
func logPlot(title, x, y string, logY bool) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	if logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	return p
}

func writePNG(w io.Writer, p *plot.Plot, width, height vg.Length) error {
	img := vgimg.New(width, height)
	p.Draw(draw.New(img))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
