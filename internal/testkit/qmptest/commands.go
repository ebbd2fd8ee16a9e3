package qmptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"
)

// Chardev is a chardev as the server holds it.
type Chardev struct {
	ID        string
	Path      string
	Reconnect int64  // reconnect-ms (or reconnect seconds × 1000)
	Connected bool   // its socket connection is open
	Device    string // the device using it, if any
}

// Device is a device as the server holds it.
type Device struct {
	ID         string
	Driver     string
	Chardev    string
	Bus        string // the root port, or "" for the root bus
	Slot       int
	VirtioID   int
	NumQueues  int
	QueueSize  int
	ConfigSize int
	Unplugging bool // device_del accepted, DEVICE_DELETED not yet sent
}

// state is what QEMU would hold; guarded by Server.mu.
type state struct {
	opts     Options
	chardevs []*chardev // in creation order
	devices  []*Device
}

type chardev struct {
	Chardev
	conn net.Conn
}

func newState(opts Options) state { return state{opts: opts} }

// Chardevs returns a copy of the server's chardevs.
func (s *Server) Chardevs() []Chardev {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l []Chardev
	for _, c := range s.st.chardevs {
		l = append(l, c.Chardev)
	}
	return l
}

// Devices returns a copy of the server's devices.
func (s *Server) Devices() []Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l []Device
	for _, d := range s.st.devices {
		l = append(l, *d)
	}
	return l
}

func (st *state) chardev(id string) *chardev {
	for _, c := range st.chardevs {
		if c.ID == id {
			return c
		}
	}
	return nil
}

func (st *state) device(id string) *Device {
	for _, d := range st.devices {
		if d.ID == id {
			return d
		}
	}
	return nil
}

func (st *state) closeAll() {
	for _, c := range st.chardevs {
		if c.conn != nil {
			c.conn.Close()
		}
	}
}

func genericf(format string, a ...any) *Error {
	return &Error{Class: "GenericError", Desc: fmt.Sprintf(format, a...)}
}

// exec runs a command after negotiation.
func (s *Server) exec(name string, raw json.RawMessage) (any, *Error) {
	var args map[string]json.RawMessage
	if raw != nil {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, genericf("QMP input member 'arguments' must be an object")
		}
	}
	switch name {
	case "query-version":
		v := s.opts.Version
		return map[string]any{"qemu": map[string]int{"major": v[0], "minor": v[1], "micro": v[2]}, "package": "qmptest"}, nil
	case "chardev-add":
		return s.chardevAdd(args)
	case "chardev-remove":
		return s.chardevRemove(args)
	case "device_add":
		return s.deviceAdd(args)
	case "device_del":
		return s.deviceDel(args)
	case "query-pci":
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.st.queryPCI(), nil
	case "query-chardev":
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.st.queryChardev(), nil
	case "qom-get":
		return s.qomGet(args)
	}
	return nil, &Error{Class: "CommandNotFound", Desc: fmt.Sprintf("The command %s has not been found", name)}
}

// str and num decode arguments with QEMU's errors.
func str(args map[string]json.RawMessage, key string, required bool) (string, *Error) {
	raw, ok := args[key]
	if !ok {
		if required {
			return "", genericf("Parameter '%s' is missing", key)
		}
		return "", nil
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", genericf("Invalid parameter type for '%s', expected: string", key)
	}
	return v, nil
}

func num(args map[string]json.RawMessage, key string, def int) (int, *Error) {
	raw, ok := args[key]
	if !ok {
		return def, nil
	}
	var v int
	if json.Unmarshal(raw, &v) != nil {
		return 0, genericf("Parameter '%s' expects an integer", key)
	}
	return v, nil
}

func object(args map[string]json.RawMessage, key string) (map[string]json.RawMessage, *Error) {
	var o map[string]json.RawMessage
	raw, ok := args[key]
	if !ok {
		return nil, genericf("Parameter '%s' is missing", key)
	}
	if json.Unmarshal(raw, &o) != nil || o == nil {
		return nil, genericf("Invalid parameter type for '%s', expected: object", key)
	}
	return o, nil
}

func (s *Server) chardevAdd(args map[string]json.RawMessage) (any, *Error) {
	id, e := str(args, "id", true)
	if e != nil {
		return nil, e
	}
	backend, e := object(args, "backend")
	if e != nil {
		return nil, e
	}
	typ, e := str(backend, "type", true)
	if e != nil {
		return nil, e
	}
	if typ != "socket" {
		return nil, genericf("qmptest: chardev backend type '%s' is not modelled", typ)
	}
	data, e := object(backend, "data")
	if e != nil {
		return nil, e
	}
	addr, e := object(data, "addr")
	if e != nil {
		return nil, e
	}
	if t, _ := str(addr, "type", true); t != "unix" {
		return nil, genericf("qmptest: socket address type '%s' is not modelled", t)
	}
	ad, e := object(addr, "data")
	if e != nil {
		return nil, e
	}
	path, e := str(ad, "path", true)
	if e != nil {
		return nil, e
	}
	if d := s.opts.ChardevDir; d != "" && filepath.Dir(filepath.Clean(path)) != filepath.Clean(d) {
		return nil, genericf("qmptest: socket '%s' is outside %s", path, d)
	}
	var server bool
	if raw, ok := data["server"]; ok && json.Unmarshal(raw, &server) != nil {
		return nil, genericf("Invalid parameter type for 'server', expected: boolean")
	}
	if server {
		return nil, genericf("qmptest: server chardevs are not modelled")
	}
	reconnect, e := num(data, "reconnect-ms", 0)
	if e != nil {
		return nil, e
	}
	if secs, e := num(data, "reconnect", 0); e != nil {
		return nil, e
	} else if secs > 0 {
		reconnect = secs * 1000
	}

	s.mu.Lock()
	dup := s.st.chardev(id) != nil
	s.mu.Unlock()
	if dup {
		return nil, genericf("Chardev with id '%s' already exists", id)
	}
	// QEMU connects when the chardev is created; with reconnect a
	// failure is retried later (qmptest: never) instead of refused.
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil && reconnect == 0 {
		return nil, genericf("Failed to add chardev '%s': Failed to connect to '%s': %s", id, path, strerror(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.st.chardev(id) != nil {
		if c != nil {
			c.Close()
		}
		return nil, genericf("Chardev with id '%s' already exists", id)
	}
	s.st.chardevs = append(s.st.chardevs, &chardev{Chardev: Chardev{ID: id, Path: path, Reconnect: int64(reconnect), Connected: c != nil}, conn: c})
	return map[string]any{}, nil
}

// strerror words a dial error as strerror(3) does.
func strerror(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	s := errno.Error()
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func (s *Server) chardevRemove(args map[string]json.RawMessage) (any, *Error) {
	id, e := str(args, "id", true)
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.st.chardev(id)
	switch {
	case c == nil:
		return nil, genericf("Chardev '%s' not found", id)
	case c.Device != "":
		return nil, genericf("Chardev '%s' is busy", id)
	}
	if c.conn != nil {
		c.conn.Close()
	}
	s.st.chardevs = slices.DeleteFunc(s.st.chardevs, func(x *chardev) bool { return x == c })
	return map[string]any{}, nil
}

func isVhostUser(driver string) bool { return strings.HasPrefix(driver, "vhost-user-") }

func (s *Server) deviceAdd(args map[string]json.RawMessage) (any, *Error) {
	driver, e := str(args, "driver", true)
	if e != nil {
		return nil, e
	}
	// qmptest requires an id; QEMU would make the device anonymous.
	id, e := str(args, "id", true)
	if e != nil {
		return nil, e
	}
	chr, e := str(args, "chardev", false)
	if e != nil {
		return nil, e
	}
	bus, e := str(args, "bus", false)
	if e != nil {
		return nil, e
	}
	d := &Device{ID: id, Driver: driver, Chardev: chr, Bus: bus}
	for _, p := range []struct {
		key string
		v   *int
		def int
	}{{"virtio-id", &d.VirtioID, 0}, {"num_vqs", &d.NumQueues, 1}, {"vq_size", &d.QueueSize, 64}, {"config_size", &d.ConfigSize, 0}} {
		if *p.v, e = num(args, p.key, p.def); e != nil {
			return nil, e
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.st
	if !slices.Contains(s.opts.Drivers, driver) {
		return nil, genericf("'%s' is not a valid device model name", driver)
	}
	if st.device(id) != nil {
		return nil, genericf("Duplicate device ID '%s'", id)
	}
	var c *chardev
	if isVhostUser(driver) {
		switch c = st.chardev(chr); {
		case chr == "":
			return nil, genericf("chardev is mandatory") // qmptest's wording
		case c == nil:
			return nil, genericf("Property '%s.chardev' can't find value '%s'", driver, chr)
		case c.Device != "":
			return nil, genericf("Property '%s.chardev' can't take value '%s', it's in use", driver, chr)
		case d.VirtioID < 1 || d.VirtioID > 0xffff:
			return nil, genericf("qmptest: virtio-id %d is not a device id", d.VirtioID)
		case d.NumQueues < 1 || d.NumQueues > 1024 || d.QueueSize < 1 || d.QueueSize > 1024 || d.QueueSize&(d.QueueSize-1) != 0:
			// QEMU would abort: virtio_add_queue checks VIRTQUEUE_MAX_SIZE.
			return nil, genericf("qmptest: num_vqs %d vq_size %d would abort QEMU", d.NumQueues, d.QueueSize)
		case d.ConfigSize < 0 || d.ConfigSize > 256:
			return nil, genericf("qmptest: config_size %d is over VHOST_USER_MAX_CONFIG_SIZE", d.ConfigSize)
		case !c.Connected:
			// QEMU negotiates with the back-end while realizing.
			return nil, genericf("vhost_backend_init failed: qmptest: chardev '%s' is not connected", chr)
		}
	}
	switch {
	case bus == "" || bus == "pcie.0" || bus == "pci.0":
		if !s.opts.RootHotplug {
			return nil, genericf("Bus 'pcie.0' does not support hotplugging")
		}
		d.Bus, d.Slot = "", st.freeRootSlot()
		if d.Slot < 0 {
			return nil, genericf("PCI: no slot/function available for %s, all in use or reserved", driver)
		}
	case !slices.Contains(s.opts.RootPorts, bus):
		return nil, genericf("Bus '%s' not found", bus)
	default:
		for _, o := range st.devices {
			if o.Bus == bus {
				return nil, genericf("PCI: slot 0 function 0 already occupied by %s, new func %s cannot be exposed to guest.", o.Driver, driver)
			}
		}
	}
	if c != nil {
		c.Device = id
	}
	st.devices = append(st.devices, d)
	return map[string]any{}, nil
}

// firstRootSlot is the first slot a hot-plug takes on the root bus:
// slot 0 is the host bridge, then the root ports.
func (st *state) firstRootSlot() int { return 1 + len(st.opts.RootPorts) }

func (st *state) freeRootSlot() int {
	for slot := st.firstRootSlot(); slot < 32; slot++ {
		used := false
		for _, d := range st.devices {
			used = used || d.Bus == "" && d.Slot == slot
		}
		if !used {
			return slot
		}
	}
	return -1
}

func (s *Server) deviceDel(args map[string]json.RawMessage) (any, *Error) {
	id, e := str(args, "id", true)
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.st.device(id)
	if d == nil {
		return nil, &Error{Class: "DeviceNotFound", Desc: fmt.Sprintf("Device '%s' not found", id)}
	}
	again := d.Unplugging
	d.Unplugging = true
	if !s.faults.NoDeviceDeleted {
		s.scheduleDelete(id)
	}
	if again {
		return nil, genericf("Device %s is already in the process of unplug", id)
	}
	return map[string]any{}, nil
}

// scheduleDelete removes the device after DeleteDelay and sends its
// DEVICE_DELETED events, as QEMU does once the guest lets it go.
func (s *Server) scheduleDelete(id string) {
	if s.closed {
		return
	}
	s.wg.Add(1)
	var t *time.Timer
	t = time.AfterFunc(s.opts.DeleteDelay, func() {
		defer s.wg.Done()
		s.mu.Lock()
		delete(s.timers, t)
		d := s.st.device(id)
		if d == nil || s.closed {
			s.mu.Unlock()
			return
		}
		if c := s.st.chardev(d.Chardev); c != nil && c.Device == id {
			c.Device = ""
		}
		s.st.devices = slices.DeleteFunc(s.st.devices, func(x *Device) bool { return x == d })
		cur := s.cur
		ok := cur != nil && cur.negotiated
		s.mu.Unlock()
		if ok {
			path := "/machine/peripheral/" + id
			cur.writeLine(event("DEVICE_DELETED", map[string]any{"path": path + "/virtio-backend"}))
			cur.writeLine(event("DEVICE_DELETED", map[string]any{"device": id, "path": path}))
		}
	})
	s.timers[t] = struct{}{}
}

const (
	virtioVendor = 0x1af4
	virtioModern = 0x1040 // + virtio device id
)

func (st *state) pciDevice(d *Device, bus int) map[string]any {
	dev := virtioModern + d.VirtioID
	if d.Driver == "virtio-net-pci" {
		dev = virtioModern + 1
	}
	return map[string]any{
		"bus": bus, "slot": d.Slot, "function": 0, "qdev_id": d.ID,
		"id":         map[string]int{"vendor": virtioVendor, "device": dev},
		"class_info": map[string]any{"class": 0xff00},
		"regions":    []any{},
	}
}

func (st *state) queryPCI() any {
	devs := []any{map[string]any{
		"bus": 0, "slot": 0, "function": 0, "qdev_id": "",
		"id": map[string]int{"vendor": 0x8086, "device": 0x29c0}, "class_info": map[string]any{"class": 0x0600, "desc": "Host bridge"},
		"regions": []any{},
	}}
	for i, rp := range st.opts.RootPorts {
		num := i + 1
		bridgeBus := map[string]any{"number": num, "secondary": num, "subordinate": num}
		bridge := map[string]any{"bus": bridgeBus}
		if st.opts.Unnumbered {
			bridgeBus["number"], bridgeBus["secondary"], bridgeBus["subordinate"] = 0, 0, 0
		} else {
			behind := []any{}
			for _, d := range st.devices {
				if d.Bus == rp {
					behind = append(behind, st.pciDevice(d, num))
				}
			}
			bridge["devices"] = behind
		}
		devs = append(devs, map[string]any{
			"bus": 0, "slot": 1 + i, "function": 0, "qdev_id": rp,
			"id": map[string]int{"vendor": 0x1b36, "device": 0x000c}, "class_info": map[string]any{"class": 0x0604, "desc": "PCI bridge"},
			"pci_bridge": bridge, "regions": []any{},
		})
	}
	for _, d := range st.devices {
		if d.Bus == "" {
			devs = append(devs, st.pciDevice(d, 0))
		}
	}
	return []any{map[string]any{"bus": 0, "devices": devs}}
}

func (st *state) queryChardev() any {
	l := []any{}
	for _, c := range st.chardevs {
		name := "unix:" + c.Path
		if !c.Connected {
			name = "disconnected:" + name
		}
		l = append(l, map[string]any{"label": c.ID, "filename": name, "frontend-open": c.Device != ""})
	}
	return l
}

func (s *Server) qomGet(args map[string]json.RawMessage) (any, *Error) {
	path, e := str(args, "path", true)
	if e != nil {
		return nil, e
	}
	prop, e := str(args, "property", true)
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := strings.CutPrefix(path, "/machine/peripheral/")
	d := s.st.device(id)
	if !ok || d == nil {
		return nil, &Error{Class: "DeviceNotFound", Desc: fmt.Sprintf("Device '%s' not found", path)}
	}
	switch {
	case prop == "type":
		return d.Driver, nil
	case prop == "chardev" && isVhostUser(d.Driver):
		return d.Chardev, nil
	}
	return nil, genericf("Property '%s.%s' not found", d.Driver, prop)
}
