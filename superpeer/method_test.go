package superpeer

import (
	"context"
	"errors"
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
	if names := MethodNames(); len(names) == 0 || names[0] != "prefix" {
		t.Fatalf("MethodNames() = %v, want prefix first", names)
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

func TestEnv_AttachOver(t *testing.T) {
	base := AttachOptions{Capacity: 3, TTL: time.Second, Displace: -1}
	got := Env{Attach: AttachOptions{Capacity: 7}}.AttachOver(base)
	if got.Capacity != 7 || got.TTL != time.Second || got.Displace != -1 {
		t.Fatalf("AttachOver = %+v, want capacity 7 over the rest of base", got)
	}
	if got := (Env{}).AttachOver(base); got.Capacity != 3 || got.TTL != time.Second {
		t.Fatalf("an empty Env changed the options: %+v", got)
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
	node, err := dht.New(ctx, h, dht.RoutingTableRefresh(0))
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
	// Env's S and capacity win over the options'; the options' Pow2 stays.
	sel := build(Env{Superpeers: 5, Attach: AttachOptions{Capacity: 9}, Options: PrefixOptions{Superpeers: 2, Pow2: true}})
	if g, c := sel.Scheme().Groups(), sel.Attach().Capacity(); g != 8 || c != 9 {
		t.Fatalf("groups %d capacity %d, want 8 (2^⌈log2 5⌉) and 9", g, c)
	}
	sel.Close()
	if g := build(Env{Options: &PrefixOptions{Superpeers: 3}}).Scheme().Groups(); g != 3 {
		t.Fatalf("groups %d, want 3 from the options", g)
	}
	if _, err := m.New(node, Env{Options: 42}); !errors.Is(err, ErrMethodOptions) {
		t.Fatalf("New with an int for options = %v, want ErrMethodOptions", err)
	}
}
