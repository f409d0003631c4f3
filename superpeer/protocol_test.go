package superpeer

import (
	"context"
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/superpeer-overlay/superpeer/dht"
)

// defaultAttachID is the attach protocol's ID under the default prefix, as
// peers of earlier versions speak it.
const defaultAttachID protocol.ID = "/superpeer/attach/1.0.0"

// TestAttach_ProtocolPrefix: the default ID is unchanged, and attach
// protocols under two prefixes on the same hosts serve only their own
// overlay's requests; a request to a host that runs only another overlay
// finds no protocol to speak.
func TestAttach_ProtocolPrefix(t *testing.T) {
	hs := hosts(t, 3)
	def := attachAll(t, hs[2:])[0]
	if !slices.Contains(hs[2].Mux().Protocols(), defaultAttachID) || attachProtocol(dht.DefaultProtocolPrefix) != defaultAttachID {
		t.Fatalf("the default attach protocol serves %v, not %s", hs[2].Mux().Protocols(), defaultAttachID)
	}
	a := attachAll(t, hs[:2], WithProtocolPrefix("/a"))
	b := attachAll(t, hs[:2], WithProtocolPrefix("/b"))
	a[0].SetRole(asRole(Superpeer, hs[0].ID()))
	b[0].SetRole(asRole(Client, ""))
	ctx := context.Background()
	if ans, err := a[1].Request(ctx, hs[0].ID(), false, nil, 0); err != nil || ans.Status != Accepted {
		t.Fatalf("an /a request to the /a superpeer: %+v, %v", ans, err)
	}
	if ans, err := b[1].Request(ctx, hs[0].ID(), false, nil, 0); err != nil || ans.Status != NotSuperpeer {
		t.Fatalf("a /b request to a host that is a superpeer of /a only: %+v, %v, want NOT_SUPERPEER", ans, err)
	}
	if a[0].Load() != 1 || a[0].Stats.Served.Load() != 1 || b[0].Load() != 0 || b[0].Stats.Served.Load() != 1 {
		t.Errorf("/a served %d (load %d), /b served %d (load %d): want 1 (1) and 1 (0)",
			a[0].Stats.Served.Load(), a[0].Load(), b[0].Stats.Served.Load(), b[0].Load())
	}
	def.SetRole(asRole(Superpeer, hs[2].ID()))
	if _, err := a[1].Request(ctx, hs[2].ID(), false, nil, 0); err == nil {
		t.Error("a host of the default overlay answered an /a request")
	}
	if def.Stats.Served.Load() != 0 || def.Load() != 0 {
		t.Errorf("the default attach protocol served %d", def.Stats.Served.Load())
	}
	if _, err := NewAttach(hs[2], WithProtocolPrefix("a")); err == nil {
		t.Error("a prefix without / accepted")
	}
}

// TestNewPrefix_AttachUnderTheNodesPrefix: the selector's attach protocol
// takes the node's prefix, and another one is refused.
func TestNewPrefix_AttachUnderTheNodesPrefix(t *testing.T) {
	hs := hosts(t, 1)
	node, err := dht.New(context.Background(), hs[0], dht.WithRoutingTableRefresh(0), dht.WithProtocolPrefix("/x"))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if _, err := NewPrefix(node, WithProtocolPrefix("/y")); err == nil {
		t.Error("an attach prefix other than the node's accepted")
	}
	sel, err := NewPrefix(node)
	if err != nil {
		t.Fatal(err)
	}
	protos := hs[0].Mux().Protocols()
	if !slices.Contains(protos, "/x/attach/1.0.0") || slices.Contains(protos, defaultAttachID) {
		t.Errorf("the selector of a /x node serves %v", protos)
	}
	sel.Close()
	if slices.Contains(hs[0].Mux().Protocols(), "/x/attach/1.0.0") {
		t.Error("the attach protocol outlived the selector")
	}
}
