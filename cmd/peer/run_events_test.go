package main

import (
	"slices"
	"testing"

	"github.com/superpeer-overlay/superpeer/repel"
)

// tokenEvents names the events counted since the last call, in EventKind
// order, and leaves the other counters alone.
func TestTokenEvents(t *testing.T) {
	seen := map[string]uint64{}
	stats := map[string]uint64{repel.EventMinted.String(): 1, "lookups": 7}
	if got, want := tokenEvents(seen, stats), []string{"minted 1"}; !slices.Equal(got, want) {
		t.Fatalf("first: %q, want %q", got, want)
	}
	if got := tokenEvents(seen, stats); len(got) != 0 {
		t.Fatalf("nothing new: %q", got)
	}
	stats[repel.EventRegionMoved.String()] = 1
	stats[repel.EventMoveOffered.String()] = 2
	stats["lookups"] = 9
	want := []string{"move-offered 2", "region-moved 1"}
	if got := tokenEvents(seen, stats); !slices.Equal(got, want) {
		t.Fatalf("region move: %q, want %q", got, want)
	}
	if _, ok := seen["lookups"]; ok {
		t.Fatal("a counter that is no event was taken for one")
	}
}
