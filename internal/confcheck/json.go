package confcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// DecodeStrict decodes data, exactly one JSON value, into v, rejecting
// unknown fields and trailing data: the rule for every JSON the daemon
// accepts (config file, API bodies, device limits). Errors are
// *ConfigError naming the key path and the byte offset of the value at
// fault, in words an operator reads (no Go types).
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	switch {
	case errors.Is(err, io.EOF):
		return &ConfigError{Err: errors.New("the document is empty"), Offset: int64(len(data))}
	case err != nil:
		return locate(data, reflect.TypeOf(v), err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &ConfigError{Err: errors.New("trailing data after the JSON document"), Offset: end + int64(len(data[end:])-len(bytes.TrimLeft(data[end:], " \t\r\n")))}
	}
	return nil
}

// Value is one value of a document: its key path and extent.
type Value struct {
	Path       string   // devices[0].pin.mode
	Keys       []string // the same for a type: "devices", "[]", "pin", "mode"
	Start, End int64
}

// Index lists every value of data in document order, as far as data is
// well formed.
func Index(data []byte) []Value {
	type frame struct {
		v      int // its index in out
		object bool
		key    string
		hasKey bool // the key of the next value is read ("" is a valid key)
		n      int  // elements so far (arrays)
	}
	var out []Value
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		start := before + int64(len(data[before:])-len(bytes.TrimLeft(data[before:], " \t\r\n:,")))
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			out[stack[len(stack)-1].v].End = dec.InputOffset()
			stack = stack[:len(stack)-1]
			continue
		}
		var path string
		var keys []string
		if n := len(stack); n > 0 {
			top := &stack[n-1]
			parent := out[top.v]
			if top.object && !top.hasKey { // tok is a key
				key, ok := tok.(string)
				if !ok { // malformed: Token does not check key types
					return out
				}
				top.key, top.hasKey = key, true
				continue
			}
			keys = append(append([]string(nil), parent.Keys...), top.key)
			path = parent.Path + "." + top.key
			if parent.Path == "" {
				path = top.key
			}
			if !top.object {
				keys[len(keys)-1] = "[]"
				path = parent.Path + PathIndex(top.n)
				top.n++
			}
			top.key, top.hasKey = "", false
		}
		out = append(out, Value{Path: path, Keys: keys, Start: start, End: dec.InputOffset()})
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, frame{v: len(out) - 1, object: d == '{'})
		}
	}
}

// locate turns a decoding error of data into v's type into a ConfigError.
func locate(data []byte, t reflect.Type, err error) *ConfigError {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn):
		// Offset counts the byte at fault.
		return &ConfigError{Err: errors.New(syn.Error()), Offset: max(syn.Offset-1, 0)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &ConfigError{Err: errors.New("the document ends early"), Offset: int64(len(data))}
	case errors.As(err, &typ):
		// The innermost value that holds the offset the decoder stopped at.
		var at *Value
		values := Index(data)
		for i := range values {
			if v := &values[i]; v.Start < typ.Offset && typ.Offset <= v.End {
				at = v
			}
		}
		e := &ConfigError{Err: fmt.Errorf("want %s, got %s", kindName(typ.Type), typ.Value), Offset: typ.Offset}
		if at != nil {
			e.Path, e.Offset = at.Path, at.Start
		}
		return e
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if key, uerr := strconv.Unquote(name); uerr == nil {
			for _, v := range Index(data) {
				if len(v.Keys) > 0 && v.Keys[len(v.Keys)-1] == key {
					if _, known := fieldType(t, v.Keys); !known {
						return &ConfigError{Path: strings.TrimSuffix(strings.TrimSuffix(v.Path, key), "."),
							Err: fmt.Errorf("unknown field %q", key), Offset: keyStart(data, v.Start)}
					}
				}
			}
		}
		return &ConfigError{Err: fmt.Errorf("unknown field %s", name), Offset: -1}
	}
	// A type's own UnmarshalJSON failed: find the first value of such a
	// type that fails alone with the same error.
	for _, v := range Index(data) {
		ft, _ := fieldType(t, v.Keys)
		for ft != nil && ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft == nil || !reflect.PointerTo(ft).Implements(reflect.TypeFor[json.Unmarshaler]()) {
			continue
		}
		if e := json.Unmarshal(data[v.Start:v.End], reflect.New(ft).Interface()); e != nil && e.Error() == err.Error() {
			var inner *ConfigError
			if errors.As(err, &inner) && inner.Offset >= 0 {
				// It located the error in its own value.
				out := UnderPath(v.Path, inner).(*ConfigError)
				out.Offset += v.Start
				return out
			}
			return &ConfigError{Path: v.Path, Err: err, Offset: v.Start}
		}
	}
	return &ConfigError{Err: err, Offset: -1}
}

// keyStart finds the start of the key whose value starts at off.
func keyStart(data []byte, off int64) int64 {
	i := bytes.LastIndexByte(data[:off], ':')
	if i < 0 {
		return off
	}
	j := bytes.LastIndexByte(bytes.TrimRight(data[:i], " \t\r\n"), '"')
	if j < 0 {
		return off
	}
	if k := bytes.LastIndexByte(data[:j], '"'); k >= 0 {
		return int64(k)
	}
	return off
}

// fieldType follows keys ("[]" for an array element) from t through
// struct fields by their JSON names. known is false when a key names no
// field; free-form values (maps, json.RawMessage, any) know every key
// below them, with a nil type.
func fieldType(t reflect.Type, keys []string) (ft reflect.Type, known bool) {
	for _, k := range keys {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == reflect.TypeFor[json.RawMessage]() || t.Kind() == reflect.Map || t.Kind() == reflect.Interface:
			return nil, true
		case k == "[]" && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			f, ok := jsonField(t, k)
			if !ok {
				return nil, false
			}
			t = f
		default:
			return nil, false
		}
	}
	return t, true
}

// jsonField is the type of t's field (or promoted field) that JSON names
// name, the shallowest first, as encoding/json picks it. Matching is
// case-insensitive, as encoding/json's is.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-" || (!f.IsExported() && !f.Anonymous):
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			embedded = append(embedded, f.Type)
		case strings.EqualFold(tag, name) || (tag == "" && strings.EqualFold(f.Name, name)):
			return f.Type, true
		}
	}
	for _, e := range embedded {
		if ft, ok := jsonField(e, name); ok {
			return ft, true
		}
	}
	return nil, false
}

// kindName says in words what a Go type wants from JSON.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<(t.Bits()-1)<<1-1)
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	}
	return "another value"
}
