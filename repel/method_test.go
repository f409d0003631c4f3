package repel

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// The repel method is found by name, and a selector given no Vivaldi
// service runs its own under the node's prefix and closes it with itself.
func TestMethod_RepelBuiltByNameOwnsItsVivaldi(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mn := mocknet.New()
	defer mn.Close()
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	node, err := dht.New(ctx, h, dht.WithRoutingTableRefresh(0), dht.WithProtocolPrefix("/test"))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	m, err := superpeer.Lookup("repel")
	if err != nil || !m.Coordinates {
		t.Fatalf("Lookup(repel) = %+v, %v; want a method with coordinates", m, err)
	}
	if _, err := m.New(node, superpeer.Env{Options: []superpeer.Option{}}); !errors.Is(err, superpeer.ErrMethodOptions) {
		t.Fatalf("New with prefix options = %v, want ErrMethodOptions", err)
	}
	sel, err := m.New(node, superpeer.Env{Superpeers: 3, Attach: []superpeer.Option{superpeer.WithCapacity(4)}})
	if err != nil {
		t.Fatal(err)
	}
	rs := sel.(*Selector)
	if got := rs.opts.Config.Tokens; got != 3 {
		t.Fatalf("tokens %d, want Env's 3", got)
	}
	if c := sel.Attach().Capacity(); c != 4 {
		t.Fatalf("capacity %d, want 4", c)
	}
	vivID := protocol.ID("/test/vivaldi/1.0.0")
	if !slices.Contains(h.Mux().Protocols(), vivID) {
		t.Fatalf("no %s among %v: the selector's own Vivaldi service is not running", vivID, h.Mux().Protocols())
	}
	if err := sel.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sel.Close()
	if slices.Contains(h.Mux().Protocols(), vivID) {
		t.Fatalf("%s still served after Close", vivID)
	}
}
