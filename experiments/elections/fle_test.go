package elections

import (
	"testing"
	"time"
)

// At every seed one server leads, every live one follows it, it has the
// highest (epoch, zxid, sid) of the live, and a quorum was needed: with a
// minority down, the live servers are still a quorum.
func TestFLE(t *testing.T) {
	runAll(t, "fle", []int{1, 2, 3, 4, 5, 7, 15, 31}, 20, func(a Algorithm, n int, seed int64, r Result) {
		live := 0
		for _, up := range r.Live {
			if up {
				live++
			}
		}
		want := n
		if a.Variant == "minority-down" {
			want = n - (n-1)/2
		}
		if live != want || 2*live <= n {
			t.Fatalf("%s n=%d: %d live", a.Key(), n, live)
		}
		// Each live server notifies every other at least once; no
		// one decides before a finalize wait.
		if r.Messages < live*(n-1) || r.Agreed < finalizeWait {
			t.Fatalf("%s n=%d seed %d: %d messages, agreed at %v", a.Key(), n, seed, r.Messages, r.Agreed)
		}
	})
}

// The vote order is epoch, then zxid, then sid.
func TestFLEVoteOrder(t *testing.T) {
	for _, c := range []struct {
		v, w fleVote
	}{
		{fleVote{Epoch: 2, Zxid: 2 << 32, Sid: 1}, fleVote{Epoch: 1, Zxid: 2<<32 | 9, Sid: 9}},
		{fleVote{Epoch: 1, Zxid: 1<<32 | 5, Sid: 1}, fleVote{Epoch: 1, Zxid: 1<<32 | 4, Sid: 9}},
		{fleVote{Epoch: 1, Zxid: 7, Sid: 3}, fleVote{Epoch: 1, Zxid: 7, Sid: 2}},
	} {
		if !c.v.better(c.w) || c.w.better(c.v) {
			t.Errorf("%v should beat %v", c.v, c.w)
		}
	}
}

// A server that comes back after the election does not displace the
// leader, even with the best vote: the decided servers answer its
// notifications with theirs, and it follows once a quorum of them and the
// leader itself said so.
func TestFLELateServer(t *testing.T) {
	const n, late = 5, 0
	newNode := func(c Config) Node {
		s := newFLE(c).(*fle)
		if c.Index == late {
			s.epoch, s.zxid = 9, 9<<32
		}
		return s
	}
	for seed := int64(1); seed <= 20; seed++ {
		sc := Scenario{N: n, Seed: seed, Topology: Complete,
			Faults: []Fault{{At: 0, Kind: Crash, Node: late}, {At: 2 * time.Second, Kind: Recover, Node: late}}}
		r, err := Run(sc, newNode)
		if err != nil {
			t.Fatal(err)
		}
		ls := r.LiveLeaders()
		if len(ls) != 1 || ls[0] < 0 || ls[0] == late {
			t.Fatalf("seed %d: live servers name %v", seed, ls)
		}
		if s := r.Nodes[late].(*fle); s.state != fleFollowing {
			t.Fatalf("seed %d: late server %v", seed, s.state)
		}
		if v := CheckFLE(r); !v.OneLeader || v.RightLeader {
			t.Fatalf("seed %d: the late server's better vote should fail only RightLeader: %+v", seed, v)
		}
	}
}
