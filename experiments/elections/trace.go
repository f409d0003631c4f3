package elections

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Chart is a traced run to draw as text or as a sequence chart: the Result
// of a run with Scenario.Trace set and, to mark them on the lifelines, the
// faults of its scenario.
type Chart struct {
	Title  string
	Result Result
	Faults []Fault
}

// TraceMessage is one message of a trace: its send and what became of it.
type TraceMessage struct {
	From, To int
	Sent     time.Duration
	// At is when the message was delivered or lost; Arrived is false for a
	// message still in flight when the run ended (then At is the end).
	At            time.Duration
	Arrived, Lost bool
	Kind, Detail  string
}

// TraceMessages pairs the sends of a trace with their deliveries and
// losses, in the order of the sends. Links are FIFO with a fixed delay, so
// a delivery belongs to the earliest message of its kind and detail still
// in flight on its link; a loss at the very time of a send (no link, or a
// link that is down) belongs to that send.
func TraceMessages(tr []TraceEvent) []TraceMessage {
	var out []TraceMessage
	type link struct{ from, to int }
	flying := map[link][]int{}
	var end time.Duration
	for _, ev := range tr {
		end = max(end, ev.At)
		l := link{ev.From, ev.To}
		if !ev.Deliver {
			flying[l] = append(flying[l], len(out))
			out = append(out, TraceMessage{From: ev.From, To: ev.To, Sent: ev.At, Kind: ev.Kind, Detail: ev.Detail})
			continue
		}
		q := flying[l]
		if len(q) == 0 {
			continue // a delivery without its send: not from Run
		}
		same := func(i int) bool { return out[i].Kind == ev.Kind && out[i].Detail == ev.Detail }
		pick := -1
		if ev.Lost {
			for k := len(q) - 1; k >= 0; k-- {
				if out[q[k]].Sent == ev.At && same(q[k]) {
					pick = k
					break
				}
			}
		}
		if pick < 0 {
			pick = slices.IndexFunc(q, same)
		}
		if pick < 0 {
			pick = 0
		}
		m := &out[q[pick]]
		m.At, m.Arrived, m.Lost = ev.At, true, ev.Lost
		flying[l] = slices.Delete(q, pick, pick+1)
	}
	for i := range out {
		if !out[i].Arrived {
			out[i].At = end
		}
	}
	return out
}

// nodes is how many lifelines the chart has.
func (c Chart) nodes() int {
	n := max(c.Result.N, len(c.Result.Configs), len(c.Result.Leaders))
	for _, ev := range c.Result.Trace {
		n = max(n, ev.From+1, ev.To+1)
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteText writes the trace as text: a few lines starting with "#" (the
// title, the nodes' IDs, the faults, the column names), then one line per
// event of the trace, in order: the time in ms, send, deliver or lost,
// from→to, the message kind and its detail.
func (c Chart) WriteText(w io.Writer) error {
	b := bufio.NewWriter(w)
	if c.Title != "" {
		fmt.Fprintf(b, "# %s\n", c.Title)
	}
	if cf := c.Result.Configs; len(cf) > 0 {
		ids := make([]string, len(cf))
		for i, x := range cf {
			ids[i] = fmt.Sprintf("%d:%d", i, x.ID)
		}
		fmt.Fprintf(b, "# node:ID %s\n", strings.Join(ids, " "))
	}
	for _, f := range c.Faults {
		fmt.Fprintf(b, "# fault %.3f ms %s\n", ms(f.At), faultText(f))
	}
	if ls := c.Result.Leaders; len(ls) > 0 {
		fmt.Fprintf(b, "# leaders at the end (node: leader, -1 none or crashed) %s\n", leadersText(ls))
	}
	fmt.Fprintf(b, "# %8s  %-7s  %-7s  %-12s  %s\n", "time_ms", "event", "from→to", "kind", "detail")
	for _, ev := range c.Result.Trace {
		what := "send"
		switch {
		case ev.Lost:
			what = "lost"
		case ev.Deliver:
			what = "deliver"
		}
		fmt.Fprintf(b, "%10.3f  %-7s  %-7s  %-12s  %s\n", ms(ev.At), what, fmt.Sprintf("%d→%d", ev.From, ev.To), ev.Kind, ev.Detail)
	}
	return b.Flush()
}

func faultText(f Fault) string {
	if f.Kind == LinkDown || f.Kind == LinkUp {
		return fmt.Sprintf("%v %d–%d", f.Kind, f.Node, f.Peer)
	}
	return fmt.Sprintf("%v %d", f.Kind, f.Node)
}

func leadersText(ls []int) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = fmt.Sprintf("%d:%d", i, l)
	}
	return strings.Join(s, " ")
}

// The sequence chart's layout, in SVG user units (pixels).
const (
	chartLeft   = 88  // the time axis
	chartRight  = 40  // room for the last node's self-messages and labels
	chartTop    = 86  // title, legend, node headers
	chartBottom = 36  // below the last event
	rowMin      = 14  // the least gap between two distinct times
	rowTypical  = 22  // the median gap between distinct times
	rowMax      = 90  // a longer gap is cut short and marked on the axis
	labelFont   = 9.0 // message labels
)

// palette colours message kinds in the order they first appear (Tableau 10).
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#e15759", "#bab0ac"}

// timeAxis maps virtual time to y: distinct times at least rowMin apart,
// proportional in between, gaps longer than rowMax cut short.
type timeAxis struct {
	ts     []time.Duration
	ys     []float64
	breaks []int // indices k where the gap before ts[k] was cut
}

func newTimeAxis(times []time.Duration) timeAxis {
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	times = slices.Compact(times)
	var gaps []float64
	for k := 1; k < len(times); k++ {
		gaps = append(gaps, ms(times[k]-times[k-1]))
	}
	scale := 1.0
	if len(gaps) > 0 {
		g := slices.Clone(gaps)
		sort.Float64s(g)
		if med := g[len(g)/2]; med > 0 {
			scale = rowTypical / med
		}
	}
	a := timeAxis{ts: times, ys: make([]float64, len(times))}
	for k := 1; k < len(times); k++ {
		d := gaps[k-1] * scale
		if d > rowMax {
			d = rowMax
			a.breaks = append(a.breaks, k)
		}
		a.ys[k] = a.ys[k-1] + max(d, rowMin)
	}
	return a
}

// y is the place of time t: exact for a time the axis was made with,
// interpolated otherwise.
func (a timeAxis) y(t time.Duration) float64 {
	k := sort.Search(len(a.ts), func(i int) bool { return a.ts[i] >= t })
	switch {
	case len(a.ts) == 0:
		return 0
	case k == len(a.ts):
		return a.ys[k-1]
	case a.ts[k] == t || k == 0:
		return a.ys[k]
	}
	f := float64(t-a.ts[k-1]) / float64(a.ts[k]-a.ts[k-1])
	return a.ys[k-1] + f*(a.ys[k]-a.ys[k-1])
}

func (a timeAxis) height() float64 {
	if len(a.ys) == 0 {
		return 0
	}
	return a.ys[len(a.ys)-1]
}

// box is a placed label, to keep labels from covering each other.
type box struct{ x0, y0, x1, y1 float64 }

func (p box) overlaps(q box) bool { return p.x0 < q.x1 && q.x0 < p.x1 && p.y0 < q.y1 && q.y0 < p.y1 }

// WriteSVG draws the trace as a sequence chart: one vertical lifeline per
// node (time runs down), one arrow per message from its send to its
// delivery, coloured by kind and labelled with it where the label does not
// cover another (every arrow's tooltip gives its times, kind and detail);
// a lost message is an arrow ending in a cross where it was lost, one
// still in flight at the end a dashed arrow. Crashes, recoveries, pauses,
// wake-ups and links going down or up are marked on the lifelines, and the
// nodes that lead at the end are starred. Distinct times are at least a
// row apart and long quiet spells are cut short (marked ≈ on the time
// axis), so the chart stays readable when delays and timeouts differ by
// orders of magnitude.
func (c Chart) WriteSVG(w io.Writer) error {
	n := c.nodes()
	msgs := TraceMessages(c.Result.Trace)
	end := c.Result.End
	var times []time.Duration
	for _, m := range msgs {
		times = append(times, m.Sent, m.At)
		end = max(end, m.At)
	}
	var faults []Fault
	for _, f := range c.Faults {
		if f.At <= end && f.Node >= 0 && f.Node < n {
			faults = append(faults, f)
			times = append(times, f.At)
		}
	}
	times = append(times, 0, end)
	ax := newTimeAxis(times)

	col := 64.0
	if n > 16 {
		col = max(24, 1024/float64(n))
	}
	x := func(i int) float64 { return chartLeft + col/2 + float64(i)*col }
	y := func(t time.Duration) float64 { return chartTop + ax.y(t) }
	width := chartLeft + col*float64(n) + chartRight
	height := chartTop + ax.height() + chartBottom
	width = max(width, 480)

	kinds := map[string]int{}
	var kindOrder []string
	for _, m := range msgs {
		if _, ok := kinds[m.Kind]; !ok {
			kinds[m.Kind] = len(kindOrder)
			kindOrder = append(kindOrder, m.Kind)
		}
	}
	colour := func(kind string) string { return palette[kinds[kind]%len(palette)] }

	b := bufio.NewWriter(w)
	esc := html.EscapeString
	title := c.Title
	if title == "" {
		title = fmt.Sprintf("%d nodes, %d messages", n, len(msgs))
	}
	lines := wrap(title, int((width-16)/7.5))
	height += 18 * float64(len(lines)-1)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif">`+"\n", width, height, width, height)
	b.WriteString("<defs>\n")
	for k, kind := range kindOrder {
		fmt.Fprintf(b, `<marker id="arrow%d" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="%s"/></marker>`+"\n", k, colour(kind))
	}
	b.WriteString("</defs>\n")
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	top := float64(chartTop + 18*(len(lines)-1))
	for k, l := range lines {
		fmt.Fprintf(b, `<text x="8" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", 18+18*k, esc(l))
	}

	fmt.Fprintf(b, `<g transform="translate(0,%.0f)">`+"\n", top-chartTop)
	// Legend: one swatch per kind, and the marks.
	lx := 8.0
	for _, kind := range kindOrder {
		fmt.Fprintf(b, `<line x1="%.1f" y1="36" x2="%.1f" y2="36" stroke="%s" stroke-width="2"/><text x="%.1f" y="40" font-size="11">%s</text>`+"\n", lx, lx+18, colour(kind), lx+22, esc(kind))
		lx += 30 + 6.5*float64(len([]rune(kind)))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="40" font-size="11" fill="#555">× lost · dashed: in flight at the end · ★ leader at the end</text>`+"\n", lx+8)

	// Time axis: labels where they do not crowd, cuts marked.
	fmt.Fprintf(b, `<g class="axis" font-size="10" fill="#555">`+"\n")
	fmt.Fprintf(b, `<text x="8" y="%.1f">time (ms)</text>`+"\n", float64(chartTop-8))
	lastLabel := math.Inf(-1)
	for k, t := range ax.ts {
		yy := chartTop + ax.ys[k]
		if yy-lastLabel < 12 {
			continue
		}
		lastLabel = yy
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%.1f</text>`, chartLeft-10, yy+3.5, ms(t))
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", chartLeft-6, yy, width-chartRight/2, yy)
	}
	for _, k := range ax.breaks {
		yy := chartTop + (ax.ys[k-1]+ax.ys[k])/2
		fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="13" text-anchor="middle">≈</text>`+"\n", chartLeft-4, yy+4)
	}
	b.WriteString("</g>\n")

	// Lifelines: solid while up, dotted while crashed, shaded while paused.
	leaders := map[int]bool{}
	for _, l := range c.Result.Leaders {
		if l >= 0 {
			leaders[l] = true
		}
	}
	b.WriteString(`<g class="lifelines">` + "\n")
	for i := 0; i < n; i++ {
		label := fmt.Sprint(i)
		sub := ""
		if i < len(c.Result.Configs) {
			sub = fmt.Sprintf("id %d", c.Result.Configs[i].ID)
		}
		weight := "normal"
		if leaders[i] {
			label = "★" + label
			weight = "bold"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="12" font-weight="%s" text-anchor="middle">%s</text>`, x(i), chartTop-24, weight, esc(label))
		if sub != "" {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="9" fill="#555" text-anchor="middle">%s</text>`, x(i), chartTop-12, esc(sub))
		}
		b.WriteString("\n")
		// Up and down spells from the crashes and recoveries.
		up, from := true, time.Duration(0)
		seg := func(to time.Duration) {
			style := `stroke="#888" stroke-width="1.2"`
			if !up {
				style = `stroke="#ccc" stroke-width="1" stroke-dasharray="2,3"`
			}
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/>`+"\n", x(i), y(from), x(i), y(to), style)
		}
		var pausedAt time.Duration = -1
		for _, f := range faults {
			if f.Node != i {
				continue
			}
			switch f.Kind {
			case Crash, Recover:
				if up == (f.Kind == Crash) {
					seg(f.At)
					up, from = !up, f.At
				}
			case Pause:
				if pausedAt < 0 {
					pausedAt = f.At
				}
			case Resume:
				if pausedAt >= 0 {
					fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="8" height="%.1f" fill="#999" fill-opacity="0.35"><title>paused %s–%s ms</title></rect>`+"\n", x(i)-4, y(pausedAt), y(f.At)-y(pausedAt), trimFloat(ms(pausedAt)), trimFloat(ms(f.At)))
					pausedAt = -1
				}
			}
		}
		seg(end + 1)
		if pausedAt >= 0 {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="8" height="%.1f" fill="#999" fill-opacity="0.35"><title>paused from %s ms</title></rect>`+"\n", x(i)-4, y(pausedAt), y(end)-y(pausedAt), trimFloat(ms(pausedAt)))
		}
	}
	b.WriteString("</g>\n")

	// Fault marks.
	b.WriteString(`<g class="faults" font-size="9">` + "\n")
	for _, f := range faults {
		xx, yy := x(f.Node), y(f.At)
		tip := fmt.Sprintf("<title>%s ms: %s</title>", trimFloat(ms(f.At)), esc(faultText(f)))
		switch f.Kind {
		case Crash:
			fmt.Fprintf(b, `<g>%s<path d="M%.1f,%.1f l10,10 m0,-10 l-10,10" stroke="#c00" stroke-width="2.5"/><text x="%.1f" y="%.1f" fill="#c00">crash</text></g>`+"\n", tip, xx-5, yy-5, xx+7, yy-4)
		case Recover:
			fmt.Fprintf(b, `<g>%s<circle cx="%.1f" cy="%.1f" r="4" fill="#2a2"/><text x="%.1f" y="%.1f" fill="#2a2">recover</text></g>`+"\n", tip, xx, yy, xx+7, yy-4)
		case Wake:
			fmt.Fprintf(b, `<g>%s<path d="M%.1f,%.1f l5,-8 l5,8 z" fill="#666"/><text x="%.1f" y="%.1f" fill="#666">wake</text></g>`+"\n", tip, xx-5, yy+3, xx+7, yy-4)
		case Pause, Resume:
			fmt.Fprintf(b, `<g>%s<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#666" stroke-width="2"/><text x="%.1f" y="%.1f" fill="#666">%v</text></g>`+"\n", tip, xx-6, yy, xx+6, yy, xx+7, yy-3, f.Kind)
		case LinkDown, LinkUp:
			if f.Peer < 0 || f.Peer >= n {
				continue
			}
			stroke := `stroke="#c00" stroke-dasharray="3,3"`
			if f.Kind == LinkUp {
				stroke = `stroke="#2a2" stroke-dasharray="1,3"`
			}
			fmt.Fprintf(b, `<g>%s<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/><text x="%.1f" y="%.1f" fill="#555">%v</text></g>`+"\n", tip, xx, yy, x(f.Peer), yy, stroke, (xx+x(f.Peer))/2, yy-3, f.Kind)
		}
	}
	b.WriteString("</g>\n")

	// Messages, one group each, labels kept off each other.
	var placed []box
	free := func(p box) bool {
		for _, q := range placed {
			if p.overlaps(q) {
				return false
			}
		}
		return true
	}
	b.WriteString(`<g class="messages">` + "\n")
	for _, m := range msgs {
		if m.From < 0 || m.From >= n {
			continue
		}
		cls := "msg"
		switch {
		case m.Lost:
			cls += " lost"
		case !m.Arrived:
			cls += " inflight"
		}
		fate := "delivered"
		switch {
		case m.Lost:
			fate = "lost"
		case !m.Arrived:
			fate = "in flight at the end"
		}
		stroke := colour(m.Kind)
		fmt.Fprintf(b, `<g class="%s"><title>%d→%d %s %s: sent %s ms, %s %s ms</title>`, cls, m.From, m.To, esc(m.Kind), esc(m.Detail), trimFloat(ms(m.Sent)), fate, trimFloat(ms(m.At)))
		x1, y1 := x(m.From), y(m.Sent)
		y2 := y(m.At)
		var x2 float64
		switch {
		case m.To < 0 || m.To >= n:
			x2 = x1 + col*0.4 // to no one: a stub
		case m.To == m.From:
			x2 = x1
		case m.Lost && m.At == m.Sent:
			x2 = x1 + 0.35*(x(m.To)-x1) // lost at once: the link is down
		default:
			x2 = x(m.To)
		}
		mx, my := (x1+x2)/2, (y1+y2)/2
		if m.To == m.From {
			// A message to itself: a small loop to the right.
			yb := max(y2, y1+8)
			fmt.Fprintf(b, `<path d="M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="none" stroke="%s" stroke-width="1.3"`, x1, y1, x1+18, y1, x1+18, yb, x2, yb, stroke)
			mx, my = x1+18, (y1+yb)/2
			y2 = yb
		} else {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.3"`, x1, y1, x2, y2, stroke)
		}
		switch {
		case m.Lost:
			b.WriteString("/>")
			fmt.Fprintf(b, `<path d="M%.1f,%.1f l8,8 m0,-8 l-8,8" stroke="#c00" stroke-width="2"/>`, x2-4, y2-4)
		case !m.Arrived:
			fmt.Fprintf(b, ` stroke-dasharray="4,3" marker-end="url(#arrow%d)"/>`, kinds[m.Kind])
		default:
			fmt.Fprintf(b, ` marker-end="url(#arrow%d)"/>`, kinds[m.Kind])
		}
		wd := labelFont * 0.6 * float64(len([]rune(m.Kind)))
		lb := box{mx - wd/2, my - labelFont, mx + wd/2, my + 1}
		if free(lb) {
			placed = append(placed, lb)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="%g" text-anchor="middle" fill="%s" stroke="white" stroke-width="3" paint-order="stroke">%s</text>`, mx, my-1.5, labelFont, stroke, esc(m.Kind))
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</g>\n</g>\n</svg>\n")
	return b.Flush()
}

// trimFloat prints a time in ms to at most three decimals, without
// trailing zeros.
func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// wrap breaks s into lines of at most width runes, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
