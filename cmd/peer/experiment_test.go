package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExperiment_List(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"experiment", "list"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, name := range []string{"requirements", "superpeer-count", "vivaldi", "churn", "scale", "repel"} {
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
