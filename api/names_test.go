package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/api"
)

func TestValidateName(t *testing.T) {
	good := []string{"a", "vm1-rdma0", "A.b_c-9", "..a", "a..", strings.Repeat("x", api.MaxNameLen)}
	for _, n := range good {
		if err := api.ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	bad := []string{"", ".", "..", "../x", "a/b", "/abs", `a\b`, "a b", "a\x00b", "é",
		"x\n", strings.Repeat("x", api.MaxNameLen+1), "a:b", "*",
		"vstellard"} // its socket would be the API socket
	for _, n := range bad {
		if err := api.ValidateName(n); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalid", n, err)
		}
	}
}
