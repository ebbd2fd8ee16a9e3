package daemon

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

// decodeLocated is DecodeStrict whose errors are *ConfigError naming the
// key path and the byte offset of the value at fault, in words an
// operator reads (no Go types).
func decodeLocated(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	switch {
	case errors.Is(err, io.EOF):
		return &ConfigError{Err: errors.New("the document is empty"), off: int64(len(data))}
	case err != nil:
		return locate(data, reflect.TypeOf(v), err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &ConfigError{Err: errors.New("trailing data after the JSON document"), off: end + int64(len(data[end:])-len(bytes.TrimLeft(data[end:], " \t\r\n")))}
	}
	return nil
}

// jsonValue is one value of a document: its key path and extent.
type jsonValue struct {
	path       string   // devices[0].pin.mode
	keys       []string // the same for a type: "devices", "[]", "pin", "mode"
	start, end int64
}

// indexJSON lists every value of data in document order, as far as data
// is well formed.
func indexJSON(data []byte) []jsonValue {
	type frame struct {
		v      int // its index in out
		object bool
		key    string
		hasKey bool // the key of the next value is read ("" is a valid key)
		n      int  // elements so far (arrays)
	}
	var out []jsonValue
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
			out[stack[len(stack)-1].v].end = dec.InputOffset()
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
			keys = append(append([]string(nil), parent.keys...), top.key)
			path = parent.path + "." + top.key
			if parent.path == "" {
				path = top.key
			}
			if !top.object {
				keys[len(keys)-1] = "[]"
				path = parent.path + pathIndex(top.n)
				top.n++
			}
			top.key, top.hasKey = "", false
		}
		out = append(out, jsonValue{path: path, keys: keys, start: start, end: dec.InputOffset()})
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
		return &ConfigError{Err: errors.New(syn.Error()), off: max(syn.Offset-1, 0)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &ConfigError{Err: errors.New("the document ends early"), off: int64(len(data))}
	case errors.As(err, &typ):
		// The innermost value that holds the offset the decoder stopped at.
		var at *jsonValue
		values := indexJSON(data)
		for i := range values {
			if v := &values[i]; v.start < typ.Offset && typ.Offset <= v.end {
				at = v
			}
		}
		e := &ConfigError{Err: fmt.Errorf("want %s, got %s", kindName(typ.Type), typ.Value), off: typ.Offset}
		if at != nil {
			e.Path, e.off = at.path, at.start
		}
		return e
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if key, uerr := strconv.Unquote(name); uerr == nil {
			for _, v := range indexJSON(data) {
				if len(v.keys) > 0 && v.keys[len(v.keys)-1] == key {
					if _, known := fieldType(t, v.keys); !known {
						return &ConfigError{Path: strings.TrimSuffix(strings.TrimSuffix(v.path, key), "."),
							Err: fmt.Errorf("unknown field %q", key), off: keyStart(data, v.start)}
					}
				}
			}
		}
		return &ConfigError{Err: fmt.Errorf("unknown field %s", name), off: -1}
	}
	// A type's own UnmarshalJSON failed: find the first value of such a
	// type that fails alone with the same error.
	for _, v := range indexJSON(data) {
		ft, _ := fieldType(t, v.keys)
		for ft != nil && ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft == nil || !reflect.PointerTo(ft).Implements(reflect.TypeFor[json.Unmarshaler]()) {
			continue
		}
		if e := json.Unmarshal(data[v.start:v.end], reflect.New(ft).Interface()); e != nil && e.Error() == err.Error() {
			var inner *ConfigError
			if errors.As(err, &inner) && inner.off >= 0 {
				// It located the error in its own value.
				out := underPath(v.path, inner).(*ConfigError)
				out.off += v.start
				return out
			}
			return &ConfigError{Path: v.path, Err: err, off: v.start}
		}
	}
	return &ConfigError{Err: err, off: -1}
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
