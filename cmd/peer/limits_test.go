package main

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/internal/limits"
)

// peer run's resource manager has go-libp2p's defaults and a limit for
// each protocol of ours under the default prefix.
func TestResourceManager_OurProtocols(t *testing.T) {
	var refused limits.Refusals
	mgr, err := resourceManager(&refused, false)
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
