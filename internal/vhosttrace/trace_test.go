package vhosttrace

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse("# a note\n[start]\nGET_FEATURES\n  SET_OWNER  \n\n[stop]\n# ignored\nGET_VRING_BASE\n[empty]\n")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got["start"], []string{"GET_FEATURES", "SET_OWNER"}) || !slices.Equal(got["stop"], []string{"GET_VRING_BASE"}) ||
		len(got) != 3 || got["empty"] != nil {
		t.Fatalf("parsed %q", got)
	}
	if _, err := Parse("GET_FEATURES\n[start]\n"); err == nil {
		t.Fatal("a request before the first phase was accepted")
	}
}

func TestDiff(t *testing.T) {
	d := Diff([]string{"A", "B", "C"}, []string{"A", "X"})
	if !strings.HasPrefix(d, "the first 1 lines agree") || !strings.Contains(d, "want B") || !strings.Contains(d, "got X") || !strings.Contains(d, "want C") {
		t.Fatalf("diff:\n%s", d)
	}
}
