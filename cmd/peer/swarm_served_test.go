package main

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// TestServed lists what a run's coordinate services and methods will
// register, and nothing they will not: the coordinate exchange only with
// --vivaldi, the token method's protocols only when it runs.
func TestServed(t *testing.T) {
	method := func(name string) superpeer.Method {
		m, err := superpeer.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	pre := dht.DefaultProtocolPrefix
	for _, c := range []struct {
		name     string
		viv      bool
		methods  []superpeer.Method
		has, not []protocol.ID
	}{
		{"coordinates alone", true, nil, []protocol.ID{pre + "/vivaldi/1.0.0"}, []protocol.ID{pre + "/attach/1.0.0", pre + "/repel/move/1.0.0"}},
		{"prefix without coordinates", false, []superpeer.Method{method("prefix")}, []protocol.ID{pre + "/attach/1.0.0", pre + "/census/1.0.0"}, []protocol.ID{pre + "/vivaldi/1.0.0", pre + "/repel/move/1.0.0"}},
		{"repel", true, []superpeer.Method{method("repel")}, []protocol.ID{pre + "/vivaldi/1.0.0", pre + "/attach/1.0.0", pre + "/repel/move/1.0.0", pre + "/repel/survey/1.0.0", pre + "/repel/announce/1.0.0"}, nil},
		{"nothing", false, nil, nil, []protocol.ID{pre + "/vivaldi/1.0.0", pre + "/attach/1.0.0"}},
	} {
		got := served(c.viv, c.methods)(pre)
		for _, p := range c.has {
			if !slices.Contains(got, p) {
				t.Errorf("%s: %s not listed in %v", c.name, p, got)
			}
		}
		for _, p := range c.not {
			if slices.Contains(got, p) {
				t.Errorf("%s: %s listed in %v", c.name, p, got)
			}
		}
	}
}
