package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // png for SaveStack
	_ "gonum.org/v1/plot/vg/vgsvg" // svg for SaveStack

	"github.com/superpeer-overlay/superpeer/experiments/metrics"
)

// Figure holds what every plot needs besides its data.
type Figure struct {
	Title, X, Y string
	// LogX and LogY put an axis on a log scale; values ≤ 0 are then dropped.
	LogX, LogY bool
	// Width and Height of the figure; 0 is 6 × 4 inches (576 × 384 PNG pixels).
	Width, Height vg.Length
	// Legend is the corner the legend goes in, "top-left", "top-right",
	// "bottom-left" or "bottom-right", to keep it off the data; "" is top
	// right, and bottom right for a CDF, whose curves rise to the upper left.
	Legend string
}

// Series is one named curve of y against x.
type Series struct {
	Name string
	X, Y []float64
	// Points marks each data point as well as joining them.
	Points bool
}

// Sample is one named set of values for a CDF.
type Sample struct {
	Name   string
	Values []float64
}

// Layer is one named set of points in a scatter plot. Highlighted layers
// (superpeers, say) are drawn large and coloured on top of the others (the
// clients), which are small and grey.
type Layer struct {
	Name      string
	X, Y      []float64
	Highlight bool
}

// CDFPlot draws the empirical distribution of each sample as a step curve
// from 0 to 1: the fraction of values ≤ x. Use it for client RTT per method.
func CDFPlot(f Figure, samples []Sample) (*plot.Plot, error) {
	if f.Y == "" {
		f.Y = "fraction ≤ x"
	}
	p := newPlot(f)
	p.Y.Min, p.Y.Max = 0, 1
	for i, s := range samples {
		pts := metrics.CDF(s.Values)
		xys := make(plotter.XYs, 0, len(pts)+1)
		for j, c := range pts {
			if j == 0 {
				xys = append(xys, plotter.XY{X: c.X, Y: 0})
			}
			xys = append(xys, plotter.XY{X: c.X, Y: c.P})
		}
		xys = clean(xys, f)
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("report: CDF %q: %w", s.Name, err)
		}
		l.StepStyle = plotter.PostStep
		styleLine(l, i)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	if f.Legend == "" {
		p.Legend.Left, p.Legend.Top = false, false
	}
	return p, nil
}

// LinePlot draws each series as a line against x, joining points in the
// order given. Use it for error against rounds, or count
// against n with a formula curve per series.
func LinePlot(f Figure, series []Series) (*plot.Plot, error) {
	p := newPlot(f)
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("report: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
		}
		xys = clean(xys, f)
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("report: series %q: %w", s.Name, err)
		}
		styleLine(l, i)
		p.Add(l)
		if s.Points {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, fmt.Errorf("report: series %q: %w", s.Name, err)
			}
			sc.GlyphStyle.Color = l.LineStyle.Color
			sc.GlyphStyle.Shape = plotutil.Shape(i)
			p.Add(sc)
			p.Legend.Add(s.Name, l, sc)
		} else {
			p.Legend.Add(s.Name, l)
		}
	}
	return p, nil
}

// ScatterPlot draws points, the plain layers first, small and grey, then the
// highlighted ones, large and coloured. Use it for the coordinate space with
// the superpeers marked.
func ScatterPlot(f Figure, layers []Layer) (*plot.Plot, error) {
	p := newPlot(f)
	hi := 0
	for pass := 0; pass < 2; pass++ {
		for _, ly := range layers {
			if ly.Highlight != (pass == 1) {
				continue
			}
			if len(ly.X) != len(ly.Y) {
				return nil, fmt.Errorf("report: layer %q has %d x and %d y values", ly.Name, len(ly.X), len(ly.Y))
			}
			xys := make(plotter.XYs, len(ly.X))
			for j := range ly.X {
				xys[j] = plotter.XY{X: ly.X[j], Y: ly.Y[j]}
			}
			xys = clean(xys, f)
			if len(xys) == 0 {
				continue
			}
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, fmt.Errorf("report: layer %q: %w", ly.Name, err)
			}
			if ly.Highlight {
				sc.GlyphStyle.Color = plotutil.Color(hi)
				sc.GlyphStyle.Shape = filled[hi%len(filled)]
				sc.GlyphStyle.Radius = vg.Points(4)
				hi++
			} else {
				sc.GlyphStyle.Color = color.Gray{Y: 160}
				sc.GlyphStyle.Shape = draw.CircleGlyph{}
				sc.GlyphStyle.Radius = vg.Points(1.5)
			}
			p.Add(sc)
			if ly.Name != "" {
				p.Legend.Add(ly.Name, sc)
			}
		}
	}
	return p, nil
}

// SavePlot writes p as base.png and base.svg.
func SavePlot(p *plot.Plot, f Figure, base string) error {
	w, h := f.Width, f.Height
	if w <= 0 {
		w = 6 * vg.Inch
	}
	if h <= 0 {
		h = 4 * vg.Inch
	}
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(w, h, base+ext); err != nil {
			return fmt.Errorf("report: plot %s%s: %w", base, ext, err)
		}
	}
	return nil
}

// Panel is one plot of a stack (Run.Stack): its own y axis and curves,
// over the x axis the stack shares.
type Panel struct {
	Y      string
	LogY   bool
	Legend string
	Series []Series
}

// StackPlot draws each panel as a LinePlot, one above the other, the first
// on top with f's title; every panel has f's x axis and range (the widest
// of them) and the x label is drawn under the last only.
func StackPlot(f Figure, panels []Panel) ([]*plot.Plot, error) {
	if len(panels) == 0 {
		return nil, fmt.Errorf("report: stack %q has no panels", f.Title)
	}
	var out []*plot.Plot
	lo, hi := math.Inf(1), math.Inf(-1)
	for k, pn := range panels {
		pf := Figure{X: f.X, Y: pn.Y, LogX: f.LogX, LogY: pn.LogY, Legend: pn.Legend}
		if k == 0 {
			pf.Title = f.Title
		}
		p, err := LinePlot(pf, pn.Series)
		if err != nil {
			return nil, err
		}
		if k < len(panels)-1 {
			p.X.Label.Text = ""
		}
		lo, hi = min(lo, p.X.Min), max(hi, p.X.Max)
		out = append(out, p)
	}
	for _, p := range out {
		p.X.Min, p.X.Max = lo, hi
	}
	return out, nil
}

// SaveStack writes the plots one above the other as base.png and base.svg,
// their axes aligned; 0 for f's Width is 6 inches, for its Height 2.5
// inches a plot.
func SaveStack(plots []*plot.Plot, f Figure, base string) error {
	w, h := f.Width, f.Height
	if w <= 0 {
		w = 6 * vg.Inch
	}
	if h <= 0 {
		h = vg.Length(len(plots)) * 2.5 * vg.Inch
	}
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	for _, ext := range []string{"png", "svg"} {
		c, err := draw.NewFormattedCanvas(w, h, ext)
		if err != nil {
			return fmt.Errorf("report: plot %s.%s: %w", base, ext, err)
		}
		tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 2 * vg.Millimeter, PadY: 2 * vg.Millimeter}
		cs := plot.Align(rows, tiles, draw.New(c))
		for i, p := range plots {
			p.Draw(cs[i][0])
		}
		out, err := os.Create(base + "." + ext)
		if err != nil {
			return fmt.Errorf("report: plot %s.%s: %w", base, ext, err)
		}
		_, err = c.WriteTo(out)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("report: plot %s.%s: %w", base, ext, err)
		}
	}
	return nil
}

// Stack draws StackPlot and saves it in the run as name.png and name.svg.
func (r *Run) Stack(name string, f Figure, panels []Panel) error {
	ps, err := StackPlot(f, panels)
	if err != nil {
		return err
	}
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".png"), ".svg")
	if err := checkName(name); err != nil {
		return fmt.Errorf("report: plot: %w", err)
	}
	if err := SaveStack(ps, f, r.Path(name)); err != nil {
		return err
	}
	for _, ext := range []string{".png", ".svg"} {
		r.note(name + ext)
	}
	return nil
}

// CDF draws CDFPlot and saves it in the run as name.png and name.svg.
func (r *Run) CDF(name string, f Figure, samples []Sample) error {
	p, err := CDFPlot(f, samples)
	if err != nil {
		return err
	}
	return r.savePlot(p, f, name)
}

// Lines draws LinePlot and saves it in the run as name.png and name.svg.
func (r *Run) Lines(name string, f Figure, series []Series) error {
	p, err := LinePlot(f, series)
	if err != nil {
		return err
	}
	return r.savePlot(p, f, name)
}

// Scatter draws ScatterPlot and saves it in the run as name.png and name.svg.
func (r *Run) Scatter(name string, f Figure, layers []Layer) error {
	p, err := ScatterPlot(f, layers)
	if err != nil {
		return err
	}
	return r.savePlot(p, f, name)
}

func (r *Run) savePlot(p *plot.Plot, f Figure, name string) error {
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".png"), ".svg")
	if err := checkName(name); err != nil {
		return fmt.Errorf("report: plot: %w", err)
	}
	if err := SavePlot(p, f, r.Path(name)); err != nil {
		return err
	}
	for _, ext := range []string{".png", ".svg"} {
		r.note(name + ext)
	}
	return nil
}

// filled are the glyphs of highlighted layers: solid, so they stand out of
// the cloud of small grey clients.
var filled = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}

func newPlot(f Figure) *plot.Plot {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.X
	p.Y.Label.Text = f.Y
	if f.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if f.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = !strings.HasPrefix(f.Legend, "bottom")
	p.Legend.Left = strings.HasSuffix(f.Legend, "left")
	return p
}

// clean drops points gonum cannot draw: NaN or infinite values, and values
// ≤ 0 on a log axis.
func clean(xys plotter.XYs, f Figure) plotter.XYs {
	out := xys[:0]
	for _, v := range xys {
		if bad(v.X) || bad(v.Y) || (f.LogX && v.X <= 0) || (f.LogY && v.Y <= 0) {
			continue
		}
		out = append(out, v)
	}
	return out
}

func bad(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }

// styleLine gives series i its own colour, and past the palette's seven
// colours also a dash pattern, so that no two series look alike.
func styleLine(l *plotter.Line, i int) {
	l.LineStyle.Color = plotutil.Color(i)
	l.LineStyle.Width = vg.Points(1.5)
	if i >= len(plotutil.DefaultColors) {
		l.LineStyle.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
	}
}
