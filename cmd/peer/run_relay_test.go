package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
)

func loopbackHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestRun_PingHandler: /ping pings a peer at the addresses given and says
// by which relay (none for a direct path); bad requests get a reason and
// a 4xx status, and a fifth ping at once is refused.
func TestRun_PingHandler(t *testing.T) {
	a, b := loopbackHost(t), loopbackHost(t)
	r, err := newRelaying("off", "auto")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.pingHandler(a))
	defer srv.Close()
	get := func(q url.Values) (int, pingReply) {
		t.Helper()
		resp, err := http.Get(srv.URL + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var pr pingReply
		if err := json.NewDecoder(resp.Body).Decode(&pr); err != nil {
			t.Fatalf("%v: %v", q, err)
		}
		return resp.StatusCode, pr
	}
	q := url.Values{"peer": {b.ID().String()}, "count": {"4"}}
	for _, ad := range b.Addrs() {
		q.Add("addr", ad.String())
	}
	code, pr := get(q)
	if code != http.StatusOK || pr.Error != "" || pr.Via != "" || len(pr.RTTms) != 4 || pr.Peer != b.ID().String() {
		t.Fatalf("direct ping: %d %+v, want 4 RTTs, no relay", code, pr)
	}
	for _, ms := range pr.RTTms {
		if !(ms > 0 && ms < 5000) {
			t.Errorf("RTT %v ms on loopback", ms)
		}
	}
	for _, c := range []struct {
		q    url.Values
		code int
		want string
	}{
		{url.Values{"peer": {"garbage"}}, http.StatusBadRequest, "peer:"},
		{url.Values{"peer": {b.ID().String()}, "count": {"99"}}, http.StatusBadRequest, "count"},
		{url.Values{"peer": {b.ID().String()}, "count": {"x"}}, http.StatusBadRequest, "count"},
		{url.Values{"peer": {b.ID().String()}, "addr": {"nonsense"}}, http.StatusBadRequest, "addr"},
		{url.Values{"peer": {loopbackHost(t).ID().String()}, "addr": {"/ip4/127.0.0.1/tcp/1"}}, http.StatusBadGateway, "connect"},
	} {
		code, pr := get(c.q)
		if code != c.code || !strings.Contains(pr.Error, c.want) {
			t.Errorf("%v: %d %+v, want %d and an error naming %q", c.q, code, pr, c.code, c.want)
		}
	}
	// Four pings run at once at most.
	for i := 0; i < cap(r.pings); i++ {
		r.pings <- struct{}{}
	}
	if code, pr := get(q); code != http.StatusTooManyRequests || !strings.Contains(pr.Error, "busy") {
		t.Errorf("fifth ping at once: %d %+v", code, pr)
	}
}
