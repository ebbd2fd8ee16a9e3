// Package units reads and writes byte sizes the way operators type them:
// a number with an optional binary suffix, K, M, G or T (also Ki, KiB,
// KB...), each a power of 1024 as QEMU's -m takes them. vstellard's
// flags and config file and vstellarctl share it, so a size means the
// same everywhere.
package units

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxSize keeps every size representable as an int64 (QEMU's, JSON's).
const maxSize = math.MaxInt64

// ParseSize reads a size in bytes: decimal digits with an optional
// suffix K, M, G or T (any case), optionally followed by "i", "B" or
// "iB"; a bare "B" says bytes. Zero is a size; negative, fractional and
// overflowing ones are errors.
func ParseSize(s string) (uint64, error) {
	bytes := strings.TrimSuffix(s, "B")
	num := strings.TrimSuffix(bytes, "i")
	shift := 0
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K', 'k':
			shift = 10
		case 'M', 'm':
			shift = 20
		case 'G', 'g':
			shift = 30
		case 'T', 't':
			shift = 40
		}
		if shift > 0 {
			num = num[:n-1]
		} else if num != bytes {
			return 0, fmt.Errorf("size %q: a unit needs K, M, G or T before it", s)
		}
	}
	if num == "" || strings.Trim(num, "0123456789") != "" {
		return 0, fmt.Errorf("size %q: want a whole number of bytes with an optional K, M, G or T", s)
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v > maxSize>>shift {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return v << shift, nil
}

// FormatSize writes n in the largest unit that divides it exactly
// ("64G", "1536M", "4097"), so ParseSize reads it back unchanged.
func FormatSize(n uint64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if n != 0 && n&(1<<u.shift-1) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10)
}

// Size is a byte count that a flag or a JSON document may give with a
// unit: it implements flag.Value and reads a JSON number or string.
type Size uint64

// String formats like FormatSize.
func (s Size) String() string { return FormatSize(uint64(s)) }

// Set parses like ParseSize.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// errJSONSize says what a JSON size may be.
var errJSONSize = errors.New(`want a byte count such as 68719476736 or "64G"`)

// UnmarshalJSON reads a number of bytes or a string ParseSize reads.
func (s *Size) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var v string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &v); err != nil {
			return errJSONSize
		}
	} else {
		v = string(b)
	}
	return s.Set(v)
}

// MarshalJSON writes the number of bytes.
func (s Size) MarshalJSON() ([]byte, error) { return strconv.AppendUint(nil, uint64(s), 10), nil }
