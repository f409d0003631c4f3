package elections

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// tracedRun is LCR on a ring of n with the link 0–1 down from the start
// (later sends on it are lost at once, those in flight on arrival) and
// node 3 crashing mid-run (messages to it are lost on arrival).
func tracedRun(t *testing.T, n int) Chart {
	t.Helper()
	faults := []Fault{{At: 0, Kind: LinkDown, Node: 0, Peer: 1}, {At: 30 * time.Millisecond, Kind: Crash, Node: 3}}
	r, err := Run(Scenario{N: n, Seed: 3, Topology: Ring, Trace: true, Faults: faults}, newLCR)
	if err != nil {
		t.Fatal(err)
	}
	return Chart{Title: "lcr with faults", Result: r, Faults: faults}
}

type svgCounts struct {
	msgs, lost, inflight, texts int
}

// parseSVG decodes the whole document and counts the message groups.
func parseSVG(t *testing.T, b []byte) svgCounts {
	t.Helper()
	var c svgCounts
	d := xml.NewDecoder(bytes.NewReader(b))
	root := true
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root {
			if se.Name.Local != "svg" {
				t.Fatalf("root element %q", se.Name.Local)
			}
			root = false
		}
		if se.Name.Local == "text" {
			c.texts++
		}
		if se.Name.Local != "g" {
			continue
		}
		for _, a := range se.Attr {
			if a.Name.Local != "class" {
				continue
			}
			f := strings.Fields(a.Value)
			if len(f) > 0 && f[0] == "msg" {
				c.msgs++
				for _, x := range f[1:] {
					switch x {
					case "lost":
						c.lost++
					case "inflight":
						c.inflight++
					}
				}
			}
		}
	}
	return c
}

func countEvents(tr []TraceEvent) (sends, lost int) {
	for _, ev := range tr {
		if !ev.Deliver {
			sends++
		}
		if ev.Lost {
			lost++
		}
	}
	return
}

// The chart has one arrow per message sent and marks as lost exactly the
// messages the trace says were lost; the text has one line per event.
func TestTrace_ChartAndText(t *testing.T) {
	for _, c := range []Chart{tracedRun(t, 8), tracedRun(t, 16)} {
		sends, lost := countEvents(c.Result.Trace)
		if lost == 0 || sends == 0 {
			t.Fatalf("the faults lost nothing (%d sends, %d lost)", sends, lost)
		}
		var svg bytes.Buffer
		if err := c.WriteSVG(&svg); err != nil {
			t.Fatal(err)
		}
		got := parseSVG(t, svg.Bytes())
		if got.msgs != sends || got.lost != lost {
			t.Fatalf("n=%d: %d arrows (%d lost) for %d messages (%d lost)", c.Result.N, got.msgs, got.lost, sends, lost)
		}
		var txt bytes.Buffer
		if err := c.WriteText(&txt); err != nil {
			t.Fatal(err)
		}
		events := 0
		for _, line := range strings.Split(strings.TrimSuffix(txt.String(), "\n"), "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 4 || !strings.Contains(f[2], "→") {
				t.Fatalf("line %q: want time, event, from→to, kind, detail", line)
			}
			events++
		}
		if events != len(c.Result.Trace) {
			t.Fatalf("%d event lines for %d events", events, len(c.Result.Trace))
		}
		if !strings.Contains(txt.String(), "# fault 30.000 ms crash 3") || strings.Count(txt.String(), " lost ") != lost {
			t.Fatalf("text lacks the crash or the losses:\n%s", txt.String())
		}
	}
}

// Every message of a trace is paired with its own delivery or loss: not
// before it was sent, on its link, of its kind.
func TestTraceMessages_Pairing(t *testing.T) {
	c := tracedRun(t, 8)
	ms := TraceMessages(c.Result.Trace)
	sends, lost := countEvents(c.Result.Trace)
	if len(ms) != sends {
		t.Fatalf("%d messages for %d sends", len(ms), sends)
	}
	nlost, immediate := 0, 0
	for _, m := range ms {
		if !m.Arrived || m.At < m.Sent {
			t.Fatalf("message %+v", m)
		}
		if m.Lost {
			nlost++
			if m.At == m.Sent {
				immediate++
			}
		}
	}
	if nlost != lost || immediate == 0 {
		t.Fatalf("%d lost (%d at once), trace says %d", nlost, immediate, lost)
	}
	// A message still in flight at the end of a trace is drawn dashed.
	tr := []TraceEvent{{At: 0, From: 0, To: 1, Kind: "A"}, {At: 5, From: 1, To: 0, Kind: "B"}, {At: 7, From: 0, To: 1, Deliver: true, Kind: "A"}}
	var svg bytes.Buffer
	if err := (Chart{Result: Result{N: 2, Trace: tr}}).WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if got := parseSVG(t, svg.Bytes()); got.msgs != 2 || got.inflight != 1 {
		t.Fatalf("%+v", got)
	}
}

// The time axis keeps order and spacing: later is lower, distinct times a
// row apart at least, long gaps cut short.
func TestTrace_TimeAxis(t *testing.T) {
	ts := []time.Duration{0, time.Millisecond, time.Millisecond, 2 * time.Millisecond, time.Hour, 3 * time.Millisecond}
	a := newTimeAxis(ts)
	if len(a.ts) != 5 || len(a.breaks) != 1 {
		t.Fatalf("times %v, breaks %v", a.ts, a.breaks)
	}
	for k := 1; k < len(a.ys); k++ {
		if a.ys[k]-a.ys[k-1] < rowMin || a.ys[k]-a.ys[k-1] > rowMax {
			t.Fatalf("gap %v at %d", a.ys[k]-a.ys[k-1], k)
		}
	}
	if y := a.y(1500 * time.Microsecond); !(y > a.y(time.Millisecond) && y < a.y(2*time.Millisecond)) {
		t.Fatalf("interpolated y %v", y)
	}
}
