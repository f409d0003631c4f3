package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestExperiment_List(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"experiment", "list"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, name := range []string{"requirements", "superpeer-count", "vivaldi", "churn", "scale", "repel", "elections"} {
		if !strings.Contains(out.String(), name+" ") {
			t.Errorf("list lacks %q:\n%s", name, out.String())
		}
	}
}

func TestExperiment_BadInputIsAOneLineError(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"experiment"}, "missing experiment name"},
		{[]string{"experiment", "--quick"}, "missing experiment name"},
		{[]string{"experiment", "bogus"}, `unknown experiment "bogus"`},
		{[]string{"experiment", "vivaldi", "--bad"}, "flag provided but not defined: -bad"},
		{[]string{"experiment", "churn", "--seed", "x"}, "invalid value"},
		{[]string{"experiment", "scale", "stray"}, "unexpected argument"},
		{[]string{"experiment", "scale", "--timeout", "-1s"}, "--timeout"},
		{[]string{"experiment", "list", "--quick"}, "flag provided but not defined"},
		{[]string{"experiment", "elections", "--algo", "bogus"}, `unknown --algo "bogus"`},
		{[]string{"experiment", "repel", "--explore-first", "-1"}, "--explore-first -1 must not be negative"},
		{[]string{"experiment", "vivaldi", "--explore-first", "8"}, "flag provided but not defined: -explore-first"},
		{[]string{"experiment", "elections", "--n", "-3"}, "--n"},
		{[]string{"experiment", "scale", "--algo", "lcr"}, "flag provided but not defined: -algo"},
		{[]string{"experiment", "growth", "--method", "bogus"}, `--method "bogus": want prefix or repel`},
		{[]string{"experiment", "growth", "--where", "moon"}, `--where "moon": want sim or live`},
		{[]string{"experiment", "repel", "--where", "sim"}, "flag provided but not defined: -where"},
		{[]string{"experiment", "growth", "--method", "repel", "--where", "live", "--dilate", "0.5"}, "--dilate 0.5 must be in [1, 1000]"},
		{[]string{"experiment", "growth", "--method", "repel", "--where", "live", "--dilate", "NaN"}, "--dilate NaN must be in [1, 1000]"},
		{[]string{"experiment", "growth", "--dilate", "4"}, "--dilate needs --method repel --where live"},
		{[]string{"experiment", "growth", "--method", "prefix", "--where", "live", "--dilate", "4"}, "--dilate needs --method repel --where live"},
		{[]string{"experiment", "repel", "--dilate", "4"}, "flag provided but not defined: -dilate"},
		{[]string{"experiment", "growth", "--phases", "100,x"}, `phase "x": want a size in [1, 10^7]`},
		{[]string{"experiment", "growth", "--phases", "0"}, `phase "0": want a size in [1, 10^7]`},
		{[]string{"experiment", "scale", "--phases", "100"}, "flag provided but not defined: -phases"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errb.String())
		}
		msg := strings.TrimRight(errb.String(), "\n")
		if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "peer experiment: ") || !strings.Contains(msg, c.want) {
			t.Errorf("%v: stderr %q, want one line 'peer experiment: ...%s...'", c.args, msg, c.want)
		}
	}
}

// peer experiment elections --algo NAME --n N --trace FILE runs the named
// algorithm at n and writes its trace as text and SVG.
func TestExperiment_ElectionsTrace(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "lcr8")
	var out, errb bytes.Buffer
	args := []string{"experiment", "elections", "--algo", "lcr/best", "--n", "8", "--seed", "4", "--trace", trace, "--out", dir, "--id", "x"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, f := range []string{trace + ".txt", trace + ".svg", filepath.Join(dir, "elections", "x", "results.json")} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
	if s := out.String(); !strings.Contains(s, "seed 4") || !strings.Contains(s, "lcr   best") {
		t.Fatalf("stdout:\n%s", s)
	}
}

// --phases gives the growth experiment its sizes: the simulator's rows are
// at those n, in turn.
func TestExperiment_GrowthPhases(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"experiment", "growth", "--where", "sim", "--method", "prefix", "--quick", "--phases", "100,300", "--out", dir, "--id", "p"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "growth", "p", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Results struct {
			Growth struct {
				Steady []struct {
					Where string `json:"where"`
					N     int    `json:"n"`
				} `json:"steady"`
			} `json:"growth"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	var ns []int
	for _, s := range r.Results.Growth.Steady {
		if s.Where == "sim" {
			ns = append(ns, s.N)
		}
	}
	if !slices.Equal(ns, []int{100, 300}) {
		t.Fatalf("simulator rows at n %v, want [100 300]", ns)
	}
}
