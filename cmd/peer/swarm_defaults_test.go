package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/swarm"
)

// The repel method's connection defaults apply only when it runs, and
// never over a value given on the command line.
func TestRepelConnDefaults(t *testing.T) {
	for _, c := range []struct {
		name      string
		args      []string
		repelRuns bool
		grace     time.Duration
		tidy      bool
	}{
		{"prefix alone", nil, false, swarm.DefaultConnGrace, false},
		{"repel", nil, true, swarm.RepelConnGrace, true},
		{"repel, grace given", []string{"--conn-grace", "45s"}, true, 45 * time.Second, true},
		{"repel, grace given as the old default", []string{"--conn-grace", "30s"}, true, 30 * time.Second, true},
		{"repel, untidy", []string{"--vivaldi-tidy=false"}, true, swarm.RepelConnGrace, false},
		{"prefix, tidy", []string{"--vivaldi-tidy"}, false, swarm.DefaultConnGrace, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("swarm", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			grace := fs.Duration("conn-grace", swarm.DefaultConnGrace, "")
			tidy := fs.Bool("vivaldi-tidy", false, "")
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			repelConnDefaults(fs, c.repelRuns, grace, tidy)
			if *grace != c.grace || *tidy != c.tidy {
				t.Errorf("grace %v, tidy %v; want %v, %v", *grace, *tidy, c.grace, c.tidy)
			}
		})
	}
}
