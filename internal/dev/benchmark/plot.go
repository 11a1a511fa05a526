package benchmark

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// WritePlot draws each design's cost per 1,000 renders against its p99
// detection, a panel per volume, both axes logarithmic: an SVG written
// by hand, numbered points, a legend below. The floor is a dashed line
// (it has no detection of its own).
func WritePlot(w io.Writer, ds []Design) error {
	const pw, ph, left, top, bottom = 400, 300, 60, 30, 40
	legend := 16 * len(ds)
	width, height := pw*len(Volumes), top+ph+bottom+legend
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	// Detection's decades span every design's p99.
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for _, d := range ds {
		if !d.Floor {
			xlo, xhi = min(xlo, math.Log10(d.P99.Seconds())), max(xhi, math.Log10(d.P99.Seconds()))
		}
	}
	xlo, xhi = math.Floor(xlo), math.Ceil(xhi)
	plotW, plotH := float64(pw-left-20), float64(ph-bottom)
	for i, n := range Volumes {
		ylo, yhi := math.Inf(1), math.Inf(-1)
		costs := make([]float64, len(ds))
		for j, d := range ds {
			costs[j] = d.Month(n).Total() / n * 1000
			ylo, yhi = min(ylo, math.Log10(costs[j])), max(yhi, math.Log10(costs[j]))
		}
		ylo, yhi = math.Floor(ylo), math.Ceil(yhi)
		if yhi == ylo {
			yhi++
		}
		ox := float64(i*pw + left)
		X := func(s float64) float64 { return ox + (math.Log10(s)-xlo)/(xhi-xlo)*plotW }
		Y := func(c float64) float64 { return float64(top) + (yhi-math.Log10(c))/(yhi-ylo)*plotH }
		p(`<text x="%.0f" y="18" font-weight="bold">%s renders a month</text>`+"\n", ox, fmtVolume(n))
		p(`<rect x="%.0f" y="%d" width="%.0f" height="%.0f" fill="none" stroke="black"/>`+"\n", ox, top, plotW, plotH)
		for e := xlo; e <= xhi; e++ {
			x := X(math.Pow(10, e))
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#ddd"/><text x="%.1f" y="%.0f" text-anchor="middle">%g s</text>`+"\n",
				x, top, x, float64(top)+plotH, x, float64(top)+plotH+14, math.Pow(10, e))
		}
		for e := ylo; e <= yhi; e++ {
			y := Y(math.Pow(10, e))
			p(`<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">$%g</text>`+"\n",
				ox, y, ox+plotW, y, ox-4, y+4, math.Pow(10, e))
		}
		p(`<text x="%.0f" y="%.0f" text-anchor="middle">p99 detection</text>`+"\n", ox+plotW/2, float64(top)+plotH+30)
		p(`<text x="%.0f" y="%.0f" transform="rotate(-90 %.0f %.0f)" text-anchor="middle">$ per 1,000 renders</text>`+"\n",
			ox-45, float64(top)+plotH/2, ox-45, float64(top)+plotH/2)
		for j, d := range ds {
			if d.Floor {
				y := Y(costs[j])
				p(`<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="gray" stroke-dasharray="4 3"/><text x="%.0f" y="%.1f" fill="gray">floor</text>`+"\n",
					ox, y, ox+plotW, y, ox+4, y-3)
				continue
			}
			color := "steelblue"
			if d.Genjobs {
				color = "crimson"
			}
			x, y := X(d.P99.Seconds()), Y(costs[j])
			p(`<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/><text x="%.1f" y="%.1f">%d</text>`+"\n", x, y, color, x+5, y-4, j)
		}
	}
	for j, d := range ds {
		p(`<text x="%d" y="%d">%d: %s</text>`+"\n", left, top+ph+bottom/2+16*j, j, d.Name)
	}
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
