package peerhost

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/internal/limits"
)

// ResourceManager has go-libp2p's defaults and a limit for
// each protocol of ours under the default prefix.
func TestResourceManager_OurProtocols(t *testing.T) {
	var refused limits.Refusals
	mgr, err := ResourceManager(&refused, false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	for id, in := range map[string]int{
		"/superpeer/attach/1.0.0": 256, "/superpeer/census/1.0.0": 32, "/superpeer/vivaldi/1.0.0": 256,
		"/superpeer/kad/closest/1.0.0": 256, "/superpeer/repel/announce/1.0.0": 256,
		"/superpeer/repel/move/1.0.0": 32, "/superpeer/repel/survey/1.0.0": 64,
	} {
		err := mgr.ViewProtocol(protocol.ID(id), func(s network.ProtocolScope) error {
			if got := s.(rcmgr.ResourceScopeLimiter).Limit().GetStreamLimit(network.DirInbound); got != in {
				t.Errorf("%s: %d inbound streams, want %d", id, got, in)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// With defaultsOnly our protocols take go-libp2p's default protocol
// limits, as a host built by libp2p.New without options does.
func TestResourceManager_DefaultsOnly(t *testing.T) {
	mgr, err := ResourceManager(nil, false, true)
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	_ = mgr.ViewProtocol("/superpeer/attach/1.0.0", func(s network.ProtocolScope) error {
		if got := s.(rcmgr.ResourceScopeLimiter).Limit().GetStreamLimit(network.DirInbound); got < 512 {
			t.Errorf("attach: %d inbound streams, want go-libp2p's default (at least 512)", got)
		}
		return nil
	})
}

// One peer may have at most PeerStreamsInbound streams in with our
// limits, go-libp2p's default (more than its transient scope's) without.
func TestResourceManager_PeerStreams(t *testing.T) {
	for _, c := range []struct {
		defaultsOnly bool
		ok           func(int) bool
	}{{false, func(n int) bool { return n == PeerStreamsInbound }}, {true, func(n int) bool { return n >= 256 }}} {
		mgr, err := ResourceManager(nil, false, c.defaultsOnly)
		if err != nil {
			t.Fatal(err)
		}
		_ = mgr.ViewPeer("12D3KooWKsimDu9pRfdaqcuTQhouLF6kV7JR7YukgFFJf4wtSypt", func(s network.PeerScope) error {
			if got := s.(rcmgr.ResourceScopeLimiter).Limit().GetStreamLimit(network.DirInbound); !c.ok(got) {
				t.Errorf("defaults only %v: %d streams in from one peer", c.defaultsOnly, got)
			}
			return nil
		})
		mgr.Close()
	}
}
