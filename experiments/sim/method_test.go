package sim

import (
	"errors"
	"slices"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func TestRun_ByNameIsTheMethodsSimulation(t *testing.T) {
	const n, S = 60, 4
	rtt := latency.NewSynthetic(n, 2, latency.SyntheticConfig{})
	ids, keys, err := Identities(2, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := Env{RTT: rtt, IDs: ids, Keys: keys, Superpeers: S, Capacity: 30, Seed: 2}
	got, err := Run("prefix", env)
	if err != nil {
		t.Fatal(err)
	}
	scheme, _ := superpeer.Exact(S)
	want := Prefix(keys, scheme, 30)
	if !slices.Equal(got.Superpeers, want.Superpeers) || !slices.Equal(got.Assignment, want.Assignment) {
		t.Fatalf("Run(prefix) superpeers %v, Prefix %v", got.Superpeers, want.Superpeers)
	}
	// A method with coordinates gets Vivaldi first.
	rp, err := Run("repel", env)
	if err != nil {
		t.Fatal(err)
	}
	if len(rp.Superpeers) != S || slices.Contains(rp.Assignment, -1) {
		t.Fatalf("Run(repel): %d superpeers (want %d), assignment %v", len(rp.Superpeers), S, rp.Assignment)
	}
	if _, err := Run("nosuch", env); !errors.Is(err, superpeer.ErrUnknownMethod) {
		t.Fatalf("Run(nosuch) = %v, want superpeer.ErrUnknownMethod", err)
	}
	env.IDs = env.IDs[:10]
	if _, err := Run("prefix", env); err == nil {
		t.Fatal("Run with 10 IDs for 60 peers: no error")
	}
}

func TestRegister_RefusesATakenName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering prefix twice did not panic")
		}
	}()
	Register(Method{Name: "prefix", Simulate: func(Env) (Outcome, error) { return Outcome{}, nil }})
}
