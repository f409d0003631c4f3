package superpeer

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/superpeer-overlay/superpeer/dht"
)

func TestMethods_PrefixRegisteredUnknownRefused(t *testing.T) {
	m, err := Lookup("prefix")
	if err != nil || m.Name != "prefix" || m.Coordinates || m.Summary == "" {
		t.Fatalf("Lookup(prefix) = %+v, %v", m, err)
	}
	if names := methodNames(); len(names) == 0 || names[0] != "prefix" {
		t.Fatalf("methodNames() = %v, want prefix first", names)
	}
	_, err = Lookup("nosuch")
	if !errors.Is(err, ErrUnknownMethod) || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("Lookup(nosuch) = %v, want ErrUnknownMethod listing prefix", err)
	}
}

func TestRegister_RefusesDuplicatesAndBadNames(t *testing.T) {
	mustPanic := func(what string, m Method) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("Register(%s) did not panic", what)
			}
		}()
		Register(m)
	}
	newSel := func(*dht.Node, Env) (Selector, error) { return nil, nil }
	mustPanic("a taken name", Method{Name: "prefix", New: newSel})
	mustPanic("an empty name", Method{New: newSel})
	mustPanic("a name with a space", Method{Name: "a b", New: newSel})
	mustPanic("no New", Method{Name: "nonew"})
	if _, err := Lookup("nonew"); err == nil {
		t.Fatal("a refused registration is listed")
	}
}

func TestOptions_RefusedByName(t *testing.T) {
	for name, opt := range map[string]Option{
		"WithSuperpeers(0)":         WithSuperpeers(0),
		"WithSuperpeers(too many)":  WithSuperpeers(1<<maxPrefixBits + 1),
		"WithRecheck(-1s)":          WithRecheck(-time.Second),
		"WithClientRecheck(0)":      WithClientRecheck(0),
		"WithMinRecheck(0)":         WithMinRecheck(0),
		"WithStartSpread(-1)":       WithStartSpread(-1),
		"WithCapacity(-1)":          WithCapacity(-1),
		"WithTTL(2ns)":              WithTTL(2),
		"WithTTL(too long)":         WithTTL(time.Duration(math.MaxUint32)*time.Millisecond + 1),
		"WithClock(nil)":            WithClock(nil),
		"WithProtocolPrefix(\"a\")": WithProtocolPrefix("a"),
	} {
		if _, err := applyOptions([]Option{opt}); !errors.Is(err, ErrOption) {
			t.Errorf("%s: %v, want ErrOption", name, err)
		}
	}
	// Later options override earlier ones; displacement defaults on.
	o, err := applyOptions([]Option{WithCapacity(3), WithTTL(time.Second), WithCapacity(7)})
	if err != nil || o.Attach.Capacity != 7 || o.Attach.TTL != time.Second || o.Attach.Displace != DefaultDisplace {
		t.Fatalf("applyOptions = %+v, %v; want capacity 7, TTL 1s, displace %v", o, err, DefaultDisplace)
	}
}

func TestMethod_PrefixBuiltByName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mn := mocknet.New()
	defer mn.Close()
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	node, err := dht.New(ctx, h, dht.WithRoutingTableRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	m, err := Lookup("prefix")
	if err != nil {
		t.Fatal(err)
	}
	build := func(env Env) *PrefixSelector {
		t.Helper()
		sel, err := m.New(node, env)
		if err != nil {
			t.Fatalf("New(%+v): %v", env, err)
		}
		t.Cleanup(func() { sel.Close() })
		return sel.(*PrefixSelector)
	}
	// Env's S and capacity win over the method options'; their Pow2 stays.
	sel := build(Env{Superpeers: 5, Attach: []Option{WithCapacity(9)}, Options: []Option{WithSuperpeers(2), WithCapacity(4), WithPow2()}})
	if g, c := sel.Scheme().Groups(), sel.Attach().Capacity(); g != 8 || c != 9 {
		t.Fatalf("groups %d capacity %d, want 8 (2^⌈log2 5⌉) and 9", g, c)
	}
	sel.Close()
	if g := build(Env{Options: []Option{WithSuperpeers(3)}}).Scheme().Groups(); g != 3 {
		t.Fatalf("groups %d, want 3 from the options", g)
	}
	if _, err := m.New(node, Env{Options: 42}); !errors.Is(err, ErrMethodOptions) {
		t.Fatalf("New with an int for options = %v, want ErrMethodOptions", err)
	}
}
