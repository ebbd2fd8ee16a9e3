package hotplug

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Version is the QEMU version from the QMP greeting.
type Version struct {
	Major, Minor, Micro int
	Package             string
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// msgKind is what a line from QEMU is.
type msgKind int

const (
	kindGreeting msgKind = iota + 1
	kindReply
	kindEvent
)

// message is one line QEMU sent, checked against QMP's shapes.
type message struct {
	kind msgKind
	// greeting
	version      Version
	capabilities []string
	// reply
	id   json.RawMessage // absent: nil
	ret  json.RawMessage // a success reply's "return"
	qerr *QMPError       // an error reply's class and desc
	// event
	event string
	data  json.RawMessage
}

// errNotQMP is wrapped by every parse error.
var errNotQMP = errors.New("not a QMP message")

// parseMessage checks one line (without its line end) from a QMP server:
// a greeting {"QMP": {"version": ..., "capabilities": [...]}}, a reply
// with exactly one of "return" or "error" {"class", "desc"} and an
// optional "id", or an event {"event", "timestamp", "data"}.
func parseMessage(line []byte) (message, error) {
	var m message
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil || obj == nil {
		return m, fmt.Errorf("%w: not a JSON object", errNotQMP)
	}
	_, isReturn := obj["return"]
	_, isError := obj["error"]
	switch {
	case obj["QMP"] != nil:
		return parseGreeting(obj["QMP"])
	case obj["event"] != nil:
		return parseEvent(obj)
	case isReturn && isError:
		return m, fmt.Errorf("%w: reply has both return and error", errNotQMP)
	case isReturn:
		m.kind, m.id, m.ret = kindReply, obj["id"], obj["return"]
		return m, nil
	case isError:
		m.kind, m.id = kindReply, obj["id"]
		var e struct {
			Class *string `json:"class"`
			Desc  *string `json:"desc"`
		}
		if err := json.Unmarshal(obj["error"], &e); err != nil || e.Class == nil || e.Desc == nil || *e.Class == "" {
			return m, fmt.Errorf("%w: error reply without a class and desc", errNotQMP)
		}
		m.qerr = &QMPError{Class: *e.Class, Desc: *e.Desc}
		return m, nil
	}
	return m, fmt.Errorf("%w: neither a greeting, a reply nor an event", errNotQMP)
}

func parseGreeting(raw json.RawMessage) (message, error) {
	var g struct {
		Version *struct {
			QEMU *struct {
				Major, Minor, Micro *int
			} `json:"qemu"`
			Package string `json:"package"`
		} `json:"version"`
		Capabilities *[]string `json:"capabilities"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		return message{}, fmt.Errorf("%w: malformed greeting: %v", errNotQMP, err)
	}
	if g.Version == nil || g.Version.QEMU == nil || g.Capabilities == nil {
		return message{}, fmt.Errorf("%w: greeting without version.qemu or capabilities", errNotQMP)
	}
	q := g.Version.QEMU
	if q.Major == nil || q.Minor == nil || q.Micro == nil || *q.Major < 0 || *q.Minor < 0 || *q.Micro < 0 {
		return message{}, fmt.Errorf("%w: greeting's QEMU version is not major.minor.micro", errNotQMP)
	}
	return message{
		kind:         kindGreeting,
		version:      Version{Major: *q.Major, Minor: *q.Minor, Micro: *q.Micro, Package: g.Version.Package},
		capabilities: *g.Capabilities,
	}, nil
}

func parseEvent(obj map[string]json.RawMessage) (message, error) {
	m := message{kind: kindEvent, data: obj["data"]}
	if err := json.Unmarshal(obj["event"], &m.event); err != nil || m.event == "" {
		return m, fmt.Errorf("%w: event name is not a non-empty string", errNotQMP)
	}
	var ts struct{ Seconds, Microseconds *int64 }
	if err := json.Unmarshal(obj["timestamp"], &ts); err != nil || ts.Seconds == nil || ts.Microseconds == nil {
		return m, fmt.Errorf("%w: event %s without a timestamp", errNotQMP, m.event)
	}
	if m.data != nil {
		var d map[string]json.RawMessage
		if err := json.Unmarshal(m.data, &d); err != nil || d == nil {
			return m, fmt.Errorf("%w: event %s data is not an object", errNotQMP, m.event)
		}
	}
	return m, nil
}

// idString returns a reply's id if it is a JSON string.
func (m message) idString() (string, bool) {
	var s string
	if m.id == nil || json.Unmarshal(m.id, &s) != nil {
		return "", false
	}
	return s, true
}

// command is a QMP command; every one we send carries an id.
type command struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        string `json:"id"`
}

// idPrefix marks our command ids; replies echo them.
const idPrefix = "vst-"

func commandID(n uint64) string { return idPrefix + strconv.FormatUint(n, 10) }

// quote shortens a line from the peer for an error message.
func quote(b []byte) string {
	const max = 80
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}
