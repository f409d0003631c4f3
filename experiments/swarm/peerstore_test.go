package swarm

import (
	"testing"
	"unsafe"

	mockClock "github.com/benbjohnson/clock"
	"github.com/libp2p/go-libp2p/core/peer"
	pstore "github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/host/peerstore/pstoremem"
	pt "github.com/libp2p/go-libp2p/p2p/host/peerstore/test"
	ma "github.com/multiformats/go-multiaddr"
)

// The interned peerstore passes go-libp2p's own peerstore, address book
// and key book suites, the ones its in-memory peerstore is held to.
func TestInternedPeerstore_LibP2PSuites(t *testing.T) {
	in := newInterner()
	t.Run("peerstore", func(t *testing.T) {
		pt.TestPeerstore(t, func() (pstore.Peerstore, func()) {
			ps := newInternedPeerstore(in)
			return ps, func() { _ = ps.Close() }
		})
	})
	t.Run("protocol limit", func(t *testing.T) {
		ps := newInternedPeerstore(in)
		defer ps.Close()
		pt.TestPeerstoreProtoStoreLimits(t, ps, maxProtocols)
	})
	t.Run("addresses", func(t *testing.T) {
		clk := mockClock.NewMock()
		pt.TestAddrBook(t, func() (pstore.AddrBook, func()) {
			ps := newInternedPeerstore(in, pstoremem.WithClock(clk), pstoremem.WithMaxAddressesPerPeer(0))
			return ps, func() { _ = ps.Close() }
		}, clk)
	})
	t.Run("keys", func(t *testing.T) {
		pt.TestKeyBook(t, func() (pstore.KeyBook, func()) {
			ps := newInternedPeerstore(in)
			return ps, func() { _ = ps.Close() }
		})
	})
}

// Two hosts' stores told the same things keep one copy of them: the same
// protocol set, the same agent string, the same address.
func TestInternedPeerstore_SharesWhatHostsLearn(t *testing.T) {
	in := newInterner()
	a, b := newInternedPeerstore(in), newInternedPeerstore(in)
	defer a.Close()
	defer b.Close()
	p := peer.ID("remote")
	protos := func() []protocol.ID {
		// Fresh strings each time, as identify decodes them.
		return []protocol.ID{protocol.ID(string([]byte("/ipfs/kad/1.0.0"))), protocol.ID(string([]byte("/ipfs/ping/1.0.0")))}
	}
	addr := func() ma.Multiaddr { return ma.StringCast("/ip4/10.0.0.1/tcp/4242") }
	for _, ps := range []*internedPeerstore{a, b} {
		if err := ps.SetProtocols(p, protos()...); err != nil {
			t.Fatal(err)
		}
		if err := ps.Put(p, "AgentVersion", string([]byte("superpeer/1"))); err != nil {
			t.Fatal(err)
		}
		ps.AddAddr(p, addr(), pstore.PermanentAddrTTL)
	}
	if a.protos[p] != b.protos[p] {
		t.Error("the same protocol list is two sets")
	}
	av, _ := a.Get(p, "AgentVersion")
	bv, _ := b.Get(p, "AgentVersion")
	if as, bs := av.(string), bv.(string); as != "superpeer/1" || unsafeData(as) != unsafeData(bs) {
		t.Errorf("agent strings %q and %q are two copies", as, bs)
	}
	aa, ba := a.Addrs(p), b.Addrs(p)
	if len(aa) != 1 || len(ba) != 1 || !aa[0].Equal(addr()) || &aa[0][0] != &ba[0][0] {
		t.Errorf("addresses %v and %v are two copies", aa, ba)
	}
	// Lists whose IDs would run together stay different sets.
	if in.set([]protocol.ID{"a\x00b"}) == in.set([]protocol.ID{"a", "b"}) {
		t.Error("two protocol lists interned as one")
	}
	if s := in.set([]protocol.ID{"b", "a", "b"}); len(s.ids) != 2 || in.set([]protocol.ID{"a", "b"}) != s {
		t.Errorf("a list with a repeat, out of order: %v", s.ids)
	}
	// A change at one host is that host's alone.
	if err := a.RemoveProtocols(p, "/ipfs/ping/1.0.0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.SupportsProtocols(p, "/ipfs/ping/1.0.0"); len(got) != 1 {
		t.Errorf("b lost ping when a removed it: %v", got)
	}
	if got, _ := a.GetProtocols(p); len(got) != 1 || got[0] != "/ipfs/kad/1.0.0" {
		t.Errorf("a's protocols after the removal: %v", got)
	}
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }
