package superpeer

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/superpeer/pb"
)

// A full table (its own report and the 128 others it keeps) makes a digest
// that the other side decodes and takes: the frame caps hold what the
// census keeps.
func TestCensusDigest_FullTableRoundTrip(t *testing.T) {
	now := time.Unix(1000, 0)
	a, err := newCensusBox(0.001, "a", 300, 0, censusTiming{})
	if err != nil {
		t.Fatal(err)
	}
	d := &pb.CensusDigest{S: 300}
	for i := 0; i < 200; i++ {
		d.Entries = append(d.Entries, &pb.CensusEntry{Id: []byte(fmt.Sprintf("%0100d", i)), Peers: 1000, Share: 1.0 / 300, Seq: 1, Estimate: 300000})
	}
	for i := 0; i < len(d.Entries); i += 50 {
		if _, err := a.merge(now, &pb.CensusDigest{S: 300, Entries: d.Entries[i : i+50]}); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	a.c.Report(now, 1000, 1.0/300)
	a.mu.Unlock()
	out := a.digest(now)
	if len(out.Entries) != 129 {
		t.Fatalf("digest of %d entries, want 129 (128 kept and its own)", len(out.Entries))
	}
	var buf bytes.Buffer
	if err := pbio.NewDelimitedWriter(&buf).WriteMsg(out); err != nil {
		t.Fatal(err)
	}
	var in pb.CensusDigest
	if err := decodeCensusDigest(&buf, &in); err != nil {
		t.Fatalf("a full table's digest (%d bytes) refused: %v", buf.Len(), err)
	}
	b, _ := newCensusBox(0.001, "b", 300, 0, censusTiming{})
	if _, err := b.merge(now, &in); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	k := len(b.c.Digest(now)) // not Size's count: that is of groups
	b.mu.Unlock()
	if k != 128 {
		t.Fatalf("the other side holds %d reports, want 128", k)
	}
}

// A report of more peers than a superpeer can serve (its capacity and
// itself) is skipped and counted; the others in the digest are taken.
func TestCensusDigest_OverCapacitySkipped(t *testing.T) {
	now := time.Unix(1000, 0)
	box, err := newCensusBox(0.1, "a", 2, 20, censusTiming{})
	if err != nil {
		t.Fatal(err)
	}
	d := &pb.CensusDigest{S: 2, Entries: []*pb.CensusEntry{
		{Id: []byte("honest"), Peers: 21, Share: 0.5, Seq: 1},
		{Id: []byte("liar"), Peers: 5000, Share: 0.5, Seq: 1},
	}}
	over, err := box.merge(now, d)
	if err != nil || over != 1 {
		t.Fatalf("merge: %d skipped, err %v; want the liar's report skipped", over, err)
	}
	box.mu.Lock()
	n, k := box.c.Size(now)
	box.mu.Unlock()
	if k != 1 || n != 42 {
		t.Fatalf("size %v from %d reports, want 42 from the honest one", n, k)
	}
}

// The census groups a prefix superpeer's report by its group of the exact
// code of S: the one its key falls in, whichever S comes first.
func TestCensusGroupOf(t *testing.T) {
	g := groupOf()
	for _, s := range []int{4, 7, 4, 1} {
		code, err := Exact(s)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			id := peer.ID(fmt.Sprintf("peer-%d", i))
			if got, want := g(string(id), s), code.Group(dht.KeyOf(id)); got != want {
				t.Fatalf("S = %d, %s: group %d, want %d", s, id, got, want)
			}
		}
	}
	if g("x", 0) != -1 {
		t.Fatal("a count with no code: want -1")
	}
}
