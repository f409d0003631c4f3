package report

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress reports how far a long step (building a swarm, waiting for it to
// converge) has come. On a terminal it redraws one line with \r at most every
// TerminalInterval; anywhere else (a log file, CI, a pipe), where \r would
// pile up into one unreadable line, it prints a whole line at most every
// LogInterval. Add and Set are safe from many goroutines.
type Progress struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	total    int64
	done     int64
	tty      bool
	interval time.Duration
	now      func() time.Time
	start    time.Time
	last     time.Time // last output
	shown    int64     // done at the last output
	finished bool
}

// Default intervals between updates: a redraw is cheap and ten a second
// looks live; a log line every ten seconds keeps a long run's log readable.
const (
	TerminalInterval = 100 * time.Millisecond
	LogInterval      = 10 * time.Second
)

// ProgressOption changes a Progress from its defaults.
type ProgressOption func(*Progress)

// WithTerminal overrides the detection of whether w is a terminal.
func WithTerminal(tty bool) ProgressOption {
	return func(p *Progress) {
		p.tty = tty
		p.interval = map[bool]time.Duration{true: TerminalInterval, false: LogInterval}[tty]
	}
}

// WithInterval sets the least time between two updates.
func WithInterval(d time.Duration) ProgressOption {
	return func(p *Progress) { p.interval = d }
}

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) ProgressOption {
	return func(p *Progress) { p.now = now }
}

// NewProgress starts reporting on w a step of total units (total ≤ 0 when
// the total is unknown: then only the count and rate are shown). Options are
// applied in order, so WithInterval after WithTerminal wins.
func NewProgress(w io.Writer, label string, total int, opts ...ProgressOption) *Progress {
	p := &Progress{w: w, label: label, total: int64(total), now: time.Now}
	WithTerminal(IsTerminal(w))(p)
	for _, o := range opts {
		o(p)
	}
	p.start = p.now()
	p.last = p.start
	return p
}

// IsTerminal reports whether w is a character device, such as a terminal,
// rather than a file or a pipe.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Add records n more units done.
func (p *Progress) Add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	p.maybeShowLocked()
}

// Set records that done units are done in all.
func (p *Progress) Set(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = int64(done)
	p.maybeShowLocked()
}

// Finish prints the final state and, on a terminal, ends the line. Later
// calls do nothing.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	p.showLocked(p.now())
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func (p *Progress) maybeShowLocked() {
	if p.finished {
		return
	}
	now := p.now()
	if now.Sub(p.last) < p.interval || (!p.tty && p.done == p.shown) {
		return
	}
	p.showLocked(now)
}

func (p *Progress) showLocked(now time.Time) {
	p.last, p.shown = now, p.done
	elapsed := now.Sub(p.start)
	var b strings.Builder
	if p.tty {
		b.WriteString("\r")
	}
	b.WriteString(p.label)
	b.WriteString(" ")
	if p.total > 0 {
		frac := min(float64(p.done)/float64(p.total), 1)
		if p.tty {
			const width = 30
			full := int(frac * width)
			b.WriteString("[" + strings.Repeat("=", full) + strings.Repeat(" ", width-full) + "] ")
		}
		fmt.Fprintf(&b, "%3.0f%% %d/%d", 100*frac, p.done, p.total)
	} else {
		fmt.Fprintf(&b, "%d", p.done)
	}
	if s := elapsed.Seconds(); s > 0 {
		rate := float64(p.done) / s
		fmt.Fprintf(&b, " %s/s", Format(rate))
		if p.total > 0 && rate > 0 && p.done < p.total {
			eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
			fmt.Fprintf(&b, " eta %s", eta.Round(time.Second))
		}
	}
	fmt.Fprintf(&b, " (%s)", elapsed.Round(100*time.Millisecond))
	if p.tty {
		b.WriteString("\x1b[K") // clear what a longer previous line left behind
	} else {
		b.WriteString("\n")
	}
	io.WriteString(p.w, b.String())
}
