package confcheck

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vstellar/vstellar/api"
)

// ConfigError is one mistake in the configuration: where it is (the
// file or flag, the line and column, the key path) and what is wrong. It
// prints as one line, "SOURCE:LINE:COL: PATH: CAUSE", leaving out what is
// unknown, and matches api.ErrInvalid.
type ConfigError struct {
	Source    string // the file or flag the value came from; empty if unknown
	Line, Col int    // 1-based position in Source; 0 if unknown
	Path      string // the key, as devices[0].limits.max_qp; empty for the whole document
	Err       error
	// Offset is the byte offset of the value in the JSON it was decoded
	// from; -1 if unknown. Locate turns it into Line and Col.
	Offset int64
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	// The location says the argument is invalid; the cause need not.
	msg := strings.TrimPrefix(e.Err.Error(), api.ErrInvalid.Error()+": ")
	b.WriteString(strings.Join(strings.Fields(msg), " "))
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Is makes every ConfigError an api.ErrInvalid.
func (e *ConfigError) Is(target error) bool { return target == api.ErrInvalid }

// BadValue is a ConfigError at path.
func BadValue(path, format string, args ...any) *ConfigError {
	return &ConfigError{Path: path, Err: fmt.Errorf(format, args...), Offset: -1}
}

// UnderPath returns err as a ConfigError whose path is below prefix.
func UnderPath(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		return &ConfigError{Path: prefix, Err: err, Offset: -1}
	}
	c := *ce
	switch {
	case c.Path == "":
		c.Path = prefix
	case c.Path[0] != '[':
		c.Path = prefix + "." + c.Path
	default:
		c.Path = prefix + c.Path
	}
	return &c
}

// errorList joins errors on one line, "; " between them.
type errorList []error

func (l errorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (l errorList) Unwrap() []error { return l }

// joinErrors is errors.Join without its newlines; nil without errors.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errorList(errs)
}

// lineCol turns a byte offset in data into a 1-based line and column
// (counted in bytes).
func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	line, col = 1, 1
	for _, c := range data[:off] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// Locate returns e in source, whose text is data (the JSON e was decoded
// from: a file, or a flag's value): with its line and column when its
// offset is known.
func (e *ConfigError) Locate(source string, data []byte) *ConfigError {
	c := *e
	c.Source = source
	if c.Offset >= 0 {
		c.Line, c.Col = lineCol(data, c.Offset)
	}
	return &c
}

// PathIndex is the path element of array index i.
func PathIndex(i int) string { return "[" + strconv.Itoa(i) + "]" }
