package units

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for s, want := range map[string]uint64{"4G": 4 << 30, "4GiB": 4 << 30, "4Gi": 4 << 30, "512m": 512 << 20, "1536MB": 1536 << 20,
		"1T": 1 << 40, "65536": 65536, "8K": 8192, "0": 0, "10G": 10 << 30, "8388607T": 8388607 << 40, "512B": 512, "0B": 0} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "G", "-1G", "-1", "+1", "4X", "4iB", "4i", "B", "iB", "1.5G", "9223372036854775807G", "8388608T",
		"18446744073709551616", " 4G", "4G ", "0x10", "1e9"} {
		if got, err := ParseSize(s); err == nil {
			t.Errorf("%q: %d, want an error", s, got)
		} else if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "strconv") {
			t.Errorf("%q: error %q is not one plain line", s, err)
		}
	}
}

func TestSizeJSONAndFlag(t *testing.T) {
	var v struct{ A, B, C Size }
	if err := json.Unmarshal([]byte(`{"A": 4096, "B": "64G", "C": null}`), &v); err != nil || v.A != 4096 || v.B != 64<<30 || v.C != 0 {
		t.Fatalf("%+v %v", v, err)
	}
	for _, bad := range []string{`{"A": -1}`, `{"A": 1.5}`, `{"A": "lots"}`, `{"A": true}`} {
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	var s Size
	if err := s.Set("1536M"); err != nil || s.String() != "1536M" || Size(4097).String() != "4097" || Size(0).String() != "0" {
		t.Fatalf("Set/String: %v %v", s, err)
	}
	if b, _ := json.Marshal(Size(64 << 30)); string(b) != "68719476736" {
		t.Fatalf("MarshalJSON: %s", b)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4G", "4GiB", "512m", "65536", "4X", "", "9223372036854775807G", "1Ti", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n > maxSize {
			t.Fatalf("%q: %d overflows int64", s, n)
		}
		// What FormatSize writes reads back as the same size.
		if m, err := ParseSize(FormatSize(n)); err != nil || m != n {
			t.Fatalf("%q = %d: FormatSize %q reads back as %d %v", s, n, FormatSize(n), m, err)
		}
	})
}
