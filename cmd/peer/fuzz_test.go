package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
)

// FuzzWebForms feeds arbitrary requests to the map's two POST handlers,
// /api/kill and /api/pause (`peer swarm --web`; `peer run --web` has no
// swarm view): whatever the method, query, body and content type, the
// answer is a JSON object with the status the form calls for — a 405 for
// a method other than POST, a 400 with an error for a form that does not
// parse or is not one the handler takes, a kill refused with 409 while
// the swarm has not reported (the fuzzed swarm never does) or 404 without
// a swarm — and nothing is killed; a pause answers with the state it set.
func FuzzWebForms(f *testing.F) {
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	const n = 2
	rtt := latency.NewMatrix("fuzz", n, func(i, j int) float64 { return 10 })
	s, err := swarm.New(ctx, swarm.Config{N: n, Seed: 1, RTT: rtt})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	view := swarm.NewView(s)
	form := "application/x-www-form-urlencoded"
	// mode: 0 pause, 1 kill on a swarm, 2 kill without one.
	f.Add(uint8(0), "POST", "", []byte("paused=true"), form)
	f.Add(uint8(0), "POST", "", []byte("paused=maybe"), form)
	f.Add(uint8(0), "POST", "paused=0", []byte{}, "")
	f.Add(uint8(0), "POST", "", []byte(""), form)
	f.Add(uint8(0), "GET", "paused=true", []byte{}, "")
	f.Add(uint8(1), "POST", "", []byte("superpeer=any"), form)
	f.Add(uint8(1), "POST", "", []byte("superpeer=some"), form)
	f.Add(uint8(1), "POST", "", []byte("peer=1"), form)
	f.Add(uint8(1), "POST", "", []byte("peer=-1"), form)
	f.Add(uint8(1), "POST", "", []byte("peer=x"), form)
	f.Add(uint8(1), "POST", "", []byte("fraction=0.5"), form)
	f.Add(uint8(1), "POST", "", []byte("fraction=0.1"), form)
	f.Add(uint8(1), "POST", "", []byte("fraction=NaN"), form)
	f.Add(uint8(1), "POST", "", []byte("fraction=1e-400"), form)
	f.Add(uint8(1), "POST", "fraction=0.5", []byte("peer=1"), form)
	f.Add(uint8(1), "POST", "", []byte("peer=1&peer=2"), form)
	f.Add(uint8(1), "POST", "", []byte("%zz"), form)
	f.Add(uint8(1), "POST", "", []byte("fraction=0.5;peer=1"), form)
	f.Add(uint8(1), "POST", "", bytes.Repeat([]byte("a"), 5000), form)
	f.Add(uint8(1), "POST", "", []byte("--b\r\nContent-Disposition: form-data; name=\"peer\"\r\n\r\n1\r\n--b--\r\n"), "multipart/form-data; boundary=b")
	f.Add(uint8(1), "POST", "", []byte(`{"peer": 1}`), "application/json")
	f.Add(uint8(2), "POST", "", []byte("superpeer=any"), form)
	f.Add(uint8(2), "DELETE", "", []byte("superpeer=any"), form)
	f.Fuzz(func(t *testing.T, mode uint8, method, query string, body []byte, ctype string) {
		m := &mapServer{view: view, subs: map[chan []byte]struct{}{}, rng: rand.New(rand.NewSource(1)), wake: make(chan struct{}, 1)}
		path, handle := "/api/kill", m.kill
		switch mode % 3 {
		case 0:
			path, handle = "/api/pause", m.pause
		case 2:
			m.view = nil
		}
		r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		before := m.paused
		w := httptest.NewRecorder()
		handle(w, r)
		var ans map[string]any
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("answer of type %q", ct)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
			t.Fatalf("answer %q is not a JSON object: %v", w.Body.Bytes(), err)
		}
		msg, _ := ans["error"].(string)
		if w.Code != http.StatusOK && msg == "" {
			t.Fatalf("%d without an error: %s", w.Code, w.Body.Bytes())
		}
		if live := len(s.Live()); live != n {
			t.Fatalf("%d of %d peers live after %s %s?%s %q", live, n, method, path, query, body)
		}
		want := wantStatus(mode%3, method, r)
		if strings.HasPrefix(msg, "bad form") {
			want = http.StatusBadRequest // ParseForm refused the request (Form may hold part of it)
		}
		if w.Code != want {
			t.Fatalf("%s %s?%s %q (%s): %d %s, want %d", method, path, query, body, ctype, w.Code, w.Body.Bytes(), want)
		}
		if mode%3 == 0 {
			if w.Code != http.StatusOK {
				if m.paused != before {
					t.Fatalf("a refused pause changed the state to %v", m.paused)
				}
				return
			}
			if p, ok := ans["paused"].(bool); !ok || p != m.paused {
				t.Fatalf("answered %s, paused %v", w.Body.Bytes(), m.paused)
			}
		}
	})
}

// wantStatus is the status the handler must give r, from the form it
// parsed into r.Form (mode 0 pause, 1 kill on a swarm of 2 live peers
// that has not reported, 2 kill without a swarm).
func wantStatus(mode uint8, method string, r *http.Request) int {
	if method != http.MethodPost {
		return http.StatusMethodNotAllowed
	}
	q := r.Form
	switch mode {
	case 0:
		if q.Has("paused") {
			if _, err := strconv.ParseBool(q.Get("paused")); err != nil {
				return http.StatusBadRequest
			}
		}
		return http.StatusOK
	case 2:
		return http.StatusNotFound
	}
	given := 0
	for _, k := range []string{"peer", "superpeer", "fraction"} {
		if q.Has(k) {
			given++
		}
	}
	if given != 1 {
		return http.StatusBadRequest
	}
	switch {
	case q.Has("peer"):
		if _, err := strconv.Atoi(q.Get("peer")); err != nil {
			return http.StatusBadRequest
		}
	case q.Has("superpeer"):
		if q.Get("superpeer") != "any" {
			return http.StatusBadRequest
		}
	default:
		f, err := strconv.ParseFloat(q.Get("fraction"), 64)
		if err != nil || !(f > 0 && f < 1) || int(f*2+0.5) == 0 {
			return http.StatusBadRequest // not a fraction, or none of the 2 peers
		}
	}
	return http.StatusConflict // not reported yet, or no superpeer to pick
}
