package abi

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"reflect"
	"strings"
)

// The model of guest-driver/include/vstellar-dev.h: which constants and
// structures of this package the C header carries, under which names.
// Values come from the Go constants (typed groups are read from the
// package source, so a new Opcode or Status appears by itself); payload
// structs are walked by reflection in encoding/binary's order. The
// hand-encoded types (config space, DeviceAttr, WQEs, CQE, event,
// doorbell records) are listed field by field, with the Go offset
// constants where the package has them, and cheader_test.go proves each
// listing against the type's encoder.

// cConst is one #define.
type cConst struct {
	name    string // C name
	goName  string // the Go constant it comes from ("" for derived values)
	val     uint64
	form    cForm
	comment string
}

type cForm int

const (
	formDec   cForm = iota // decimal
	formHex                // 32-bit mask: 0x...U
	formHex64              // 64-bit mask or value: 0x...ULL
)

// cGroup is a block of #defines under one comment.
type cGroup struct {
	doc    string
	consts []cConst
}

// cField is one member of a C struct.
type cField struct {
	name    string // C name
	ctype   string // __u8, __le16, __le32, __le64 or struct vstellar_x
	count   int    // array length, 0 for a scalar
	off     int
	size    int    // bytes in total
	goPath  string // Go field ("Limits.MaxQP"); "" for reserved bytes with no Go field
	offName string // the Go offset constant the offset comes from, if any
	comment string
}

// cStruct is one C struct.
type cStruct struct {
	name   string // without the vstellar_ prefix
	doc    string
	size   int
	fields []cField
	// goType is the Go type the struct encodes (nil for the doorbell
	// records and the device page, which are offset constants only).
	goType reflect.Type
	// encode encodes a *goType; nil when goType is nil.
	encode func(any) []byte
	// reflected: the layout was computed from goType's fields in the
	// order encoding/binary writes them.
	reflected bool
	// specMarker finds the struct's layout table in docs/spec.md.
	specMarker string
}

// cHeader is the whole model.
type cHeader struct {
	sections []cSection
}

// cSection is a titled part of the header: constants, structs and
// verbatim C, in that order.
type cSection struct {
	title   string
	groups  []cGroup
	structs []cStruct
	extra   string // verbatim C after the structs
}

// --- names ---

// initialisms are the upper-case words of Go names, longest first when
// one is a prefix of another (CQE before CQ).
var initialisms = []string{
	"ABI", "AH", "AHN", "AV", "CA", "CQ", "CQE", "CQN", "DGID", "FW", "GID", "GUID", "HCA", "HW",
	"ID", "IOVA", "MR", "MTU", "NAK", "OK", "PCI", "PD", "PDN", "PSN", "QP", "QPN", "RAM", "RC",
	"RDMA", "RNR", "RQ", "SGE", "SGID", "SL", "SQ", "SQD", "SQE", "SRQ", "SRQN", "UD", "WC", "WR", "RTR", "RTS",
}

// goWords splits a Go identifier into words: "MaxQPWR" is Max QP WR,
// "SGERd" is SGE Rd, "MTU256" is MTU 256, "Reserved0" is Reserved0.
func goWords(id string) []string {
	var words []string
	rs := []rune(id)
	isUp := func(r rune) bool { return r >= 'A' && r <= 'Z' }
	isLo := func(r rune) bool { return r >= 'a' && r <= 'z' }
	isDig := func(r rune) bool { return r >= '0' && r <= '9' }
	for i := 0; i < len(rs); {
		if w := mixedWordAt(string(rs[i:])); w != "" {
			words = append(words, w)
			i += len(w)
			continue
		}
		j := i
		switch {
		case isUp(rs[i]):
			for j < len(rs) && isUp(rs[j]) {
				j++
			}
			if j < len(rs) && isLo(rs[j]) {
				if j-i > 1 {
					// An upper-case run followed by a word: the run's
					// last letter starts the word.
					words = append(words, splitInitialisms(string(rs[i:j-1]))...)
					i = j - 1
					continue
				}
				for j < len(rs) && (isLo(rs[j]) || isDig(rs[j])) {
					j++
				}
				words = append(words, string(rs[i:j]))
			} else {
				words = append(words, splitInitialisms(string(rs[i:j]))...)
			}
		case isDig(rs[i]):
			for j < len(rs) && isDig(rs[j]) {
				j++
			}
			// Digits belong to a preceding word (RoCE2), but not to an
			// initialism (MTU256 is MTU 256).
			if n := len(words); n > 0 && words[n-1] != strings.ToUpper(words[n-1]) {
				words[n-1] += string(rs[i:j])
			} else {
				words = append(words, string(rs[i:j]))
			}
		default:
			for j < len(rs) && (isLo(rs[j]) || isDig(rs[j])) {
				j++
			}
			words = append(words, string(rs[i:j]))
		}
		i = j
	}
	return words
}

// mixedWords are words that mix cases but are one word in C names.
var mixedWords = []string{"PKey", "QKey", "LKey", "RKey", "RoCE"}

func mixedWordAt(s string) string {
	for _, w := range mixedWords {
		if strings.HasPrefix(s, w) {
			return w
		}
	}
	return ""
}

// splitInitialisms splits a run of capitals into known initialisms,
// longest match first; what matches none stays one word.
func splitInitialisms(run string) []string {
	var out []string
	for run != "" {
		best := ""
		for _, w := range initialisms {
			if strings.HasPrefix(run, w) && len(w) > len(best) {
				best = w
			}
		}
		if best == "" {
			return append(out, run)
		}
		out = append(out, best)
		run = run[len(best):]
	}
	return out
}

func snake(id string) string { return strings.ToLower(strings.Join(goWords(id), "_")) }

func upperSnake(id string) string { return strings.ToUpper(strings.Join(goWords(id), "_")) }

// cConstName is the C name of Go constant goName: VSTELLAR_ and the Go
// name in upper snake case, with the virtio spelling for feature bits.
func cConstName(goName string) string {
	n := upperSnake(goName)
	if rest, ok := strings.CutPrefix(n, "FEATURE_"); ok {
		n = "F_" + rest
	}
	return "VSTELLAR_" + n
}

// fieldNameOverride keeps the specification's names where the Go field
// names differ, keyed by Go type and field.
var fieldNameOverride = map[string]string{
	"PortAttr.GIDTableLen":  "gid_tbl_len",
	"PortAttr.MaxMsgSize":   "max_msg_sz",
	"PortAttr.PKeyTableLen": "pkey_tbl_len",
	"CreateQPReq.Type":      "qp_type",
	"CreateQPReq.SigAll":    "sq_sig_all",
	"QPCap.Type":            "qp_type",
	"QPCap.SigAll":          "sq_sig_all",
	"QPAttr.State":          "qp_state",
	"QPAttr.CurState":       "cur_qp_state",
	"QPAttr.AccessFlags":    "qp_access_flags",
	"QPAttr.DestQPN":        "dest_qp_num",
	"QPAttr.Port":           "port_num",
	"QPAttr.AH":             "ah_attr",
	"CreateAHReq.AH":        "ah_attr",
	"RegMRReq.NPages":       "npages",
}

func cFieldName(typ reflect.Type, f reflect.StructField) string {
	if n, ok := fieldNameOverride[typ.Name()+"."+f.Name]; ok {
		return n
	}
	return snake(f.Name)
}

// --- constants ---

func cdef(goName string, val uint64, form cForm, comment string) cConst {
	return cConst{name: cConstName(goName), goName: goName, val: val, form: form, comment: comment}
}

func cdec(goName string, val uint64) cConst { return cdef(goName, val, formDec, "") }
func chex(goName string, val uint64) cConst { return cdef(goName, val, formHex, "") }

// --- structs ---

// reflectStruct describes a payload struct that encoding/binary lays out:
// fields in declaration order, no padding.
func reflectStruct(v any, doc, marker string) cStruct {
	typ := reflect.TypeOf(v)
	s := cStruct{
		name: snake(typ.Name()), doc: doc, size: binary.Size(v), goType: typ,
		encode: func(p any) []byte { return EncodePayload(nil, p) }, reflected: true, specMarker: marker,
	}
	off := 0
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		n := binary.Size(reflect.Zero(f.Type).Interface())
		ctype, count := cTypeOf(f.Type)
		s.fields = append(s.fields, cField{name: cFieldName(typ, f), ctype: ctype, count: count, off: off, size: n, goPath: f.Name})
		off += n
	}
	return s
}

// cTypeOf is the C type of a Go field type, and the array length.
func cTypeOf(t reflect.Type) (string, int) {
	switch t.Kind() {
	case reflect.Uint8:
		return "__u8", 0
	case reflect.Uint16:
		return "__le16", 0
	case reflect.Uint32:
		return "__le32", 0
	case reflect.Uint64:
		return "__le64", 0
	case reflect.Array:
		el, _ := cTypeOf(t.Elem())
		return el, t.Len()
	case reflect.Struct:
		return "struct vstellar_" + snake(t.Name()), 0
	}
	panic(fmt.Sprintf("cheader: no C type for %v", t))
}

// hf is a hand-listed field of a hand-encoded structure: its C name, the
// Go field it holds, its offset (from the Go offset constant offName) and
// its C type.
func hf(name, goPath string, off int, offName, ctype string, count int, comment string) cField {
	size := map[string]int{"__u8": 1, "__le16": 2, "__le32": 4, "__le64": 8}[ctype]
	if count > 0 {
		size *= count
	}
	return cField{name: name, ctype: ctype, count: count, off: off, size: size, goPath: goPath, offName: offName, comment: comment}
}

func handStruct(name, doc string, goValue any, size int, encode func(any) []byte, marker string, fields ...cField) cStruct {
	s := cStruct{name: name, doc: doc, size: size, fields: fields, encode: encode, specMarker: marker}
	if goValue != nil {
		s.goType = reflect.TypeOf(goValue)
	}
	return s
}

func marshalOf(v any) []byte {
	b, err := v.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

func putOf[T interface{ Put([]byte) }](n int) func(any) []byte {
	return func(v any) []byte {
		b := make([]byte, n)
		(*v.(*T)).Put(b)
		return b
	}
}

// --- the header ---

// payloadStruct is the C struct name of an opcode's payload, from the
// payload table of opcode_test.go ("" for an empty payload).
func payloadStruct(newPayload func() any) string {
	if newPayload == nil {
		return ""
	}
	return snake(reflect.TypeOf(newPayload()).Elem().Name())
}

// cqArmShift and cqArmSNMask describe CQArmWord: arm_sn << shift | flags.
var (
	cqArmShift  = bits.TrailingZeros32(CQArmWord(1, 0))
	cqArmSNMask = ^uint32(0) >> cqArmShift
)

func buildCHeader() cHeader {
	var h cHeader
	add := func(s cSection) { h.sections = append(h.sections, s) }

	// Identification, features, virtqueues.
	feats := typedConsts("Feature", formDec, "LastDeviceFeature")
	feats = append(feats, cdec("LastDeviceFeature", uint64(LastDeviceFeature)), cdef("DeviceFeatureBits", DeviceFeatureBits, formHex, "bits 0-23"))
	add(cSection{title: "Device identification, feature bits and virtqueues (spec §2-§4)", groups: []cGroup{
		{"", []cConst{cdec("DeviceID", DeviceID), cdef("PCIVendorID", PCIVendorID, formHex, ""), cdef("PCIDeviceID", PCIDeviceID, formHex, "0x1040 + VSTELLAR_DEVICE_ID")}},
		{"Device feature bit numbers (virtio bits 0-23).", feats},
		{"Virtqueue indices.", []cConst{cdec("QueueControl", QueueControl), cdec("QueueEvent", QueueEvent), cdec("QueueWakeup", QueueWakeup),
			cdec("NumQueues", NumQueues), cdec("DefaultQueueSize", DefaultQueueSize), cdec("MaxQueueSize", MaxQueueSize)}},
	}})

	// Config space.
	c := CeilingLimits
	add(cSection{title: "Configuration space (spec §5)", groups: []cGroup{
		{"abi_version is major << 16 | minor; a driver accepts any minor of its major.", []cConst{
			cdec("ABIMajor", ABIMajor), cdec("ABIMinor", ABIMinor), cdef("ABIVersion", ABIVersion, formHex, "")}},
		{"config.status bits.", []cConst{chex("ConfigStatusDoorbellShmem", uint64(ConfigStatusDoorbellShmem)), chex("ConfigStatusDoorbellGuestRAM", uint64(ConfigStatusDoorbellGuestRAM))}},
		{"The largest limits ABI 1 allows; every config limit is 1 .. its ceiling,\nand page_size_cap must include 4 KiB.", []cConst{
			ceiling("MaxQP", uint64(c.MaxQP)), ceiling("MaxCQ", uint64(c.MaxCQ)), ceiling("MaxMR", uint64(c.MaxMR)),
			ceiling("MaxPD", uint64(c.MaxPD)), ceiling("MaxAH", uint64(c.MaxAH)), ceiling("MaxQPWR", uint64(c.MaxQPWR)),
			ceiling("MaxCQE", uint64(c.MaxCQE)), ceiling("MaxSGE", uint64(c.MaxSGE)), ceiling("MaxInlineData", uint64(c.MaxInlineData)),
			ceiling("MaxQPRdAtom", uint64(c.MaxQPRdAtom)), ceiling("MaxGID", uint64(c.MaxGID)),
			ceiling("MaxSRQ", uint64(c.MaxSRQ)), ceiling("MaxSRQWR", uint64(c.MaxSRQWR)), ceiling("MaxSRQSGE", uint64(c.MaxSRQSGE)),
			{name: "VSTELLAR_CEILING_MAX_MR_SIZE", val: c.MaxMRSize, form: formHex64},
		}},
		{"", []cConst{cdec("ConfigSize", ConfigSize)}},
	}, structs: []cStruct{configStruct()}})

	// Doorbells.
	add(cSection{title: "Doorbell region (spec §6): the device page, then one record per QP,\nCQ and SRQ. Record index: qpn - 2 for a QP, max_qp + cqn - 1 for a CQ,\nmax_qp + max_cq + srqn - 1 for an SRQ (spec §7.3); the create commands\nreturn it as doorbell_index.", groups: []cGroup{
		{"", []cConst{cdec("DoorbellShmID", DoorbellShmID), cdec("DoorbellRecordSize", DoorbellRecordSize), cdec("DoorbellMinPageSize", DoorbellMinPageSize)}},
		{"device_page.engine_flags: the engine sleeps; kick VSTELLAR_QUEUE_WAKEUP\nafter ringing a doorbell (spec §6.6).", []cConst{chex("EngineIdle", uint64(EngineIdle))}},
		{"cq_doorbell.arm: arm_sn << VSTELLAR_CQ_ARM_SN_SHIFT | flags (spec §11.3).", []cConst{
			chex("CQArmNextComp", uint64(CQArmNextComp)), chex("CQArmSolicited", uint64(CQArmSolicited)),
			{name: "VSTELLAR_CQ_ARM_FLAGS_MASK", val: uint64(CQArmWord(0, ^uint32(0))), form: formHex},
			{name: "VSTELLAR_CQ_ARM_SN_SHIFT", val: uint64(cqArmShift), form: formDec},
			{name: "VSTELLAR_CQ_ARM_SN_MASK", val: uint64(cqArmSNMask), form: formHex, comment: "arm_sn and arm_ack, unshifted"},
		}},
	}, structs: doorbellStructs(), extra: `/* The arm word for sequence number sn and VSTELLAR_CQ_ARM_* flags. */
static inline __u32 vstellar_cq_arm_word(__u32 sn, __u32 flags)
{
	return sn << VSTELLAR_CQ_ARM_SN_SHIFT | (flags & VSTELLAR_CQ_ARM_FLAGS_MASK);
}
`})

	// Control queue.
	var ops []cConst
	for _, c := range typedConsts("Opcode", formDec) {
		op := Opcode(c.val)
		req, resp := payloadStruct(opPayloads[op].newReq), payloadStruct(opPayloads[op].newResp)
		if req == "" {
			req = "-"
		}
		if resp == "" {
			resp = "-"
		}
		cm := req + " -> " + resp
		c.comment = cm
		ops = append(ops, c)
	}
	stats := typedConsts("Status", formDec)
	add(cSection{title: "Control queue (spec §7): a request header and payload, device-readable,\nthen a response header and, on VSTELLAR_STATUS_OK, the payload.", groups: []cGroup{
		{"", []cConst{cdec("RequestHeaderSize", RequestHeaderSize), cdec("ResponseHeaderSize", ResponseHeaderSize),
			cdef("MaxRequestSize", MaxRequestSize, formDec, "device-readable bytes of a chain"), cdec("MaxResponseSize", MaxResponseSize)}},
		{"Opcodes, with their payloads: struct vstellar_<request> -> struct\nvstellar_<response>, - for none.", ops},
		{"response_header.status.", stats},
	}, structs: []cStruct{
		handStruct("request_header", "", RequestHeader{}, RequestHeaderSize, marshalOf, "",
			hf("opcode", "Opcode", reqOffOpcode, "", "__le32", 0, "VSTELLAR_OP_*"),
			hf("flags", "Flags", reqOffFlags, "", "__le32", 0, "reserved, 0")),
		handStruct("response_header", "", ResponseHeader{}, ResponseHeaderSize, marshalOf, "",
			hf("status", "Status", respOffStatus, "", "__le32", 0, "VSTELLAR_STATUS_*"),
			hf("reserved", "Reserved", respOffReserve, "", "__le32", 0, "")),
	}})

	// Command payloads.
	add(cSection{title: "Command payloads (spec §7.5, §8). Handles are never 0.", groups: []cGroup{
		{"QUERY_DEVICE", []cConst{cdec("DeviceAttrSize", DeviceAttrSize)}},
		{"device_attr.device_cap_flags.", []cConst{
			cdef("DevCapResizeCQ", DevCapResizeCQ, formHex64, ""), cdef("DevCapRCRNRNAKGen", DevCapRCRNRNAKGen, formHex64, ""),
			cdef("DevCapPortActiveEvent", DevCapPortActiveEvent, formHex64, ""), cdef("DevCapOnDemandPinning", DevCapOnDemandPinning, formHex64, ""),
			cdef("DevCapMultipath", DevCapMultipath, formHex64, "")}},
		{"device_attr.atomic_cap.", []cConst{cdec("AtomicNone", uint64(AtomicNone)), cdec("AtomicHCA", uint64(AtomicHCA)), cdec("AtomicGlob", uint64(AtomicGlob))}},
		{"gid_entry.type.", []cConst{cdec("GIDTypeNone", uint64(GIDTypeNone)), cdec("GIDTypeRoCE2", uint64(GIDTypeRoCE2))}},
		{"gid_entry.flags.", []cConst{chex("GIDFlagDevice", uint64(GIDFlagDevice)), chex("GIDFlagGuest", uint64(GIDFlagGuest))}},
		{"reg_mr_req.npages: page-list entries at most.", []cConst{cdec("MaxMRPages", MaxMRPages)}},
	}, structs: []cStruct{
		deviceAttrStruct(),
		reflectStruct(HandleReq{}, "DEALLOC_PD, DESTROY_CQ, DESTROY_QP, QUERY_QP, DEREG_MR (lkey), DESTROY_AH,\nQUERY_SRQ, DESTROY_SRQ.", "**HandleReq** (8 bytes)"),
		reflectStruct(HandleResp{}, "ALLOC_PD (pdn), CREATE_AH (ahn).", "**HandleResp** (8 bytes)"),
		reflectStruct(QueryPortReq{}, "QUERY_PORT request; port is 1.", "Request **QueryPortReq**"),
		reflectStruct(PortAttr{}, "QUERY_PORT response.", "Response **PortAttr**"),
		reflectStruct(GIDReq{}, "QUERY_GID and DEL_GID request.", "Request **GIDReq**"),
		reflectStruct(GIDEntry{}, "QUERY_GID response.", "Response **GIDEntry**"),
		reflectStruct(AddGIDReq{}, "ADD_GID request.", "Request **AddGIDReq**"),
		reflectStruct(CreateCQReq{}, "CREATE_CQ request: entries x 32-byte CQEs at ring_addr.", "Request **CreateCQReq**"),
		reflectStruct(CreateCQResp{}, "CREATE_CQ response.", "Response **CreateCQResp**"),
		reflectStruct(ResizeCQReq{}, "RESIZE_CQ request.", "Request **ResizeCQReq**"),
		reflectStruct(CreateQPReq{}, "CREATE_QP request.", "Request **CreateQPReq**"),
		reflectStruct(CreateQPResp{}, "CREATE_QP response; use the strides it returns.", "Response **CreateQPResp**"),
		reflectStruct(AHAttr{}, "Address vector.", "**AHAttr** (32 bytes)"),
		reflectStruct(QPAttr{}, "MODIFY_QP and QUERY_QP attributes.", "**QPAttr** (80 bytes)"),
		reflectStruct(ModifyQPReq{}, "MODIFY_QP request; attr_mask (VSTELLAR_QP_ATTR_*) selects the fields.", "Request **ModifyQPReq**"),
		reflectStruct(QPCap{}, "What a QP was created with (QUERY_QP).", "**QPCap** (40 bytes)"),
		reflectStruct(QueryQPResp{}, "QUERY_QP response.", "**QueryQPResp** (120 bytes)"),
		reflectStruct(RegMRReq{}, "REG_MR request: npages 0 registers [addr, +length); else addr points\nat npages le64 page addresses of 1 << page_shift bytes.", "Request **RegMRReq**"),
		reflectStruct(RegMRResp{}, "REG_MR response.", "Response **RegMRResp**"),
		reflectStruct(CreateAHReq{}, "CREATE_AH request; the response is a vstellar_handle_resp.", "Request **CreateAHReq**"),
		reflectStruct(SetDoorbellAreaReq{}, "SET_DOORBELL_AREA request (guest-RAM doorbells only).", "Request **SetDoorbellAreaReq**"),
		reflectStruct(CreateSRQReq{}, "CREATE_SRQ request: size receive WQEs at ring_addr.", "Request **CreateSRQReq**"),
		reflectStruct(CreateSRQResp{}, "CREATE_SRQ response; use the stride it returns.", "Response **CreateSRQResp**"),
		reflectStruct(ModifySRQReq{}, "MODIFY_SRQ request; attr_mask (VSTELLAR_SRQ_ATTR_*) selects the fields.", "Request **ModifySRQReq**"),
		reflectStruct(SRQAttr{}, "QUERY_SRQ response.", "Response **SRQAttr**"),
	}})

	// Verbs enumerations.
	masks := append(typedConsts("QPAttrMask", formHex, "QPAttrAll"), chex("QPAttrAll", uint64(QPAttrAll)))
	add(cSection{title: "Verbs values (the IBV_* values where verbs has the concept)", groups: []cGroup{
		{"create_qp_req.qp_type; UD is reserved (NOT_SUPPORTED).", typedConsts("QPType", formDec)},
		{"QP states (qp_attr.qp_state, spec §12).", typedConsts("QPState", formDec)},
		{"modify_qp_req.attr_mask.", masks},
		{"modify_srq_req.attr_mask; MAX_WR (resize) is NOT_SUPPORTED.", append(typedConsts("SRQAttrMask", formHex, "SRQAttrAll"), chex("SRQAttrAll", uint64(SRQAttrAll)))},
		{"Access flags (reg_mr_req.access, qp_attr.qp_access_flags); local read is\nalways allowed.", append(typedConsts("Access", formHex, "AccessAll"), chex("AccessAll", uint64(AccessAll)))},
		{"MTU (qp_attr.path_mtu, port_attr.max_mtu and active_mtu).", typedConsts("MTU", formDec)},
		{"port_attr.state.", typedConsts("PortState", formDec)},
		{"port_attr.link_layer.", []cConst{cdec("LinkLayerEthernet", uint64(LinkLayerEthernet))}},
	}})

	// Data path.
	add(cSection{title: "Work queues and completion queues (spec §10, §13). A send WQE slot is the\nheader and then num_sge SGEs or inline_len bytes; a receive WQE slot the\nheader and num_sge SGEs. Slot strides come from CREATE_QP's response.", groups: []cGroup{
		{"", []cConst{cdec("SGESize", SGESize), cdec("SendWQEHeaderSize", SendWQEHeaderSize), cdec("RecvWQEHeaderSize", RecvWQEHeaderSize), cdec("CQESize", CQESize)}},
		{"send_wqe.opcode.", typedConsts("WROpcode", formDec)},
		{"send_wqe.send_flags.", []cConst{chex("SendFence", uint64(SendFence)), chex("SendSignaled", uint64(SendSignaled)), chex("SendSolicited", uint64(SendSolicited)), chex("SendInline", uint64(SendInline))}},
		{"cqe.opcode.", typedConsts("WCOpcode", formDec)},
		{"cqe.wc_flags.", []cConst{chex("WCWithImm", uint64(WCWithImm))}},
		{"cqe.status.", typedConsts("WCStatus", formDec)},
	}, structs: []cStruct{
		handStruct("sge", "Scatter/gather element.", SGE{}, SGESize, putOf[SGE](SGESize), "### 10.1 SGE",
			hf("addr", "Addr", 0x00, "", "__le64", 0, "IOVA within the MR"),
			hf("length", "Length", 0x08, "", "__le32", 0, ""),
			hf("lkey", "LKey", 0x0c, "", "__le32", 0, "")),
		sendWQEStruct(),
		handStruct("recv_wqe", "Receive WQE header; num_sge SGEs follow.", RecvWQE{}, RecvWQEHeaderSize, putOf[RecvWQE](RecvWQEHeaderSize), "### 10.3 Receive WQE",
			hf("wr_id", "WRID", 0x00, "", "__le64", 0, ""),
			hf("num_sge", "NumSGE", 0x08, "", "__le16", 0, ""),
			hf("reserved0", "", 0x0a, "", "__le16", 0, ""),
			hf("reserved1", "", 0x0c, "", "__le32", 0, "")),
		cqeStruct(),
	}, extra: wqeStrideC})

	// Events.
	add(cSection{title: "Asynchronous events on VSTELLAR_QUEUE_EVENT (spec §11)", groups: []cGroup{
		{"", []cConst{cdec("EventSize", EventSize)}},
		{"event.type.", typedConsts("EventType", formDec)},
	}, structs: []cStruct{
		handStruct("event", "One event per buffer; the device writes VSTELLAR_EVENT_SIZE bytes.", Event{}, EventSize, putOf[Event](EventSize), "### 11.1 Event record",
			hf("type", "Type", 0x00, "", "__le32", 0, "VSTELLAR_EVENT_*"),
			hf("handle", "Handle", 0x04, "", "__le32", 0, "QPN, CQN or port"),
			hf("info", "Info", 0x08, "", "__le32", 0, "QP events: the VSTELLAR_WC_* status"),
			hf("dropped", "Dropped", 0x0c, "", "__le32", 0, "events lost before this one")),
	}})
	return h
}

// wqeStrideC is SendWQEStride and RecvWQEStride in C; the compile test
// runs it against them. It computes in 64 bits so that no argument wraps.
const wqeStrideC = `/*
 * Slot strides (spec §10.5): the header plus the larger of the SGEs and the
 * inline data, rounded up to a power of two. CREATE_QP needs rings of
 * these strides and returns the strides the device uses.
 */
static inline __u64 vstellar_wqe_stride(__u64 bytes)
{
	__u64 stride = 1;

	while (stride < bytes)
		stride <<= 1;
	return stride;
}

static inline __u64 vstellar_send_wqe_stride(__u32 max_sge, __u32 max_inline)
{
	__u64 payload = (__u64)max_sge * VSTELLAR_SGE_SIZE;

	if (max_inline > payload)
		payload = max_inline;
	return vstellar_wqe_stride(VSTELLAR_SEND_WQE_HEADER_SIZE + payload);
}

static inline __u64 vstellar_recv_wqe_stride(__u32 max_sge)
{
	__u64 payload = (__u64)max_sge * VSTELLAR_SGE_SIZE;

	return vstellar_wqe_stride(VSTELLAR_RECV_WQE_HEADER_SIZE + payload);
}
`

func ceiling(field string, v uint64) cConst {
	return cConst{name: "VSTELLAR_CEILING_" + upperSnake(field), goName: "", val: v, form: formDec}
}

func configStruct() cStruct {
	return handStruct("config", "Configuration space; every field is read-only.", Config{}, ConfigSize, marshalOf, "## 5. Configuration space",
		hf("abi_version", "ABIVersion", ConfigOffABIVersion, "ConfigOffABIVersion", "__le32", 0, ""),
		hf("status", "Status", ConfigOffStatus, "ConfigOffStatus", "__le32", 0, "VSTELLAR_CONFIG_STATUS_*"),
		hf("node_guid", "NodeGUID", ConfigOffNodeGUID, "ConfigOffNodeGUID", "__le64", 0, ""),
		hf("max_mr_size", "Limits.MaxMRSize", ConfigOffMaxMRSize, "ConfigOffMaxMRSize", "__le64", 0, ""),
		hf("page_size_cap", "Limits.PageSizeCap", ConfigOffPageSizeCap, "ConfigOffPageSizeCap", "__le64", 0, ""),
		hf("max_qp", "Limits.MaxQP", ConfigOffMaxQP, "ConfigOffMaxQP", "__le32", 0, ""),
		hf("max_cq", "Limits.MaxCQ", ConfigOffMaxCQ, "ConfigOffMaxCQ", "__le32", 0, ""),
		hf("max_mr", "Limits.MaxMR", ConfigOffMaxMR, "ConfigOffMaxMR", "__le32", 0, ""),
		hf("max_pd", "Limits.MaxPD", ConfigOffMaxPD, "ConfigOffMaxPD", "__le32", 0, ""),
		hf("max_ah", "Limits.MaxAH", ConfigOffMaxAH, "ConfigOffMaxAH", "__le32", 0, ""),
		hf("max_qp_wr", "Limits.MaxQPWR", ConfigOffMaxQPWR, "ConfigOffMaxQPWR", "__le32", 0, ""),
		hf("max_cqe", "Limits.MaxCQE", ConfigOffMaxCQE, "ConfigOffMaxCQE", "__le32", 0, ""),
		hf("max_sge", "Limits.MaxSGE", ConfigOffMaxSGE, "ConfigOffMaxSGE", "__le32", 0, ""),
		hf("max_inline_data", "Limits.MaxInlineData", ConfigOffMaxInlineData, "ConfigOffMaxInlineData", "__le32", 0, ""),
		hf("max_qp_rd_atom", "Limits.MaxQPRdAtom", ConfigOffMaxQPRdAtom, "ConfigOffMaxQPRdAtom", "__le32", 0, ""),
		hf("max_gid", "Limits.MaxGID", ConfigOffMaxGID, "ConfigOffMaxGID", "__le32", 0, ""),
		hf("phys_port_cnt", "PhysPortCnt", ConfigOffPhysPortCnt, "ConfigOffPhysPortCnt", "__u8", 0, ""),
		hf("doorbell_shmid", "Doorbell.ShmID", ConfigOffDoorbellShmID, "ConfigOffDoorbellShmID", "__u8", 0, ""),
		hf("doorbell_record_size", "Doorbell.RecordSize", ConfigOffDoorbellRecSize, "ConfigOffDoorbellRecSize", "__le16", 0, ""),
		hf("doorbell_page_size", "Doorbell.PageSize", ConfigOffDoorbellPageSz, "ConfigOffDoorbellPageSz", "__le32", 0, ""),
		hf("doorbell_pages", "Doorbell.Pages", ConfigOffDoorbellPages, "ConfigOffDoorbellPages", "__le32", 0, "a power of two"),
		hf("doorbell_records_offset", "Doorbell.RecordsOffset", ConfigOffDoorbellRecOff, "ConfigOffDoorbellRecOff", "__le32", 0, ""),
		hf("doorbell_records", "Doorbell.Records", ConfigOffDoorbellRecords, "ConfigOffDoorbellRecords", "__le32", 0, ""),
		hf("max_srq", "Limits.MaxSRQ", ConfigOffMaxSRQ, "ConfigOffMaxSRQ", "__le32", 0, "ABI 1.1"),
		hf("max_srq_wr", "Limits.MaxSRQWR", ConfigOffMaxSRQWR, "ConfigOffMaxSRQWR", "__le32", 0, ""),
		hf("max_srq_sge", "Limits.MaxSRQSGE", ConfigOffMaxSRQSGE, "ConfigOffMaxSRQSGE", "__le32", 0, ""),
		hf("reserved", "", ConfigOffReserved, "ConfigOffReserved", "__u8", ConfigSize-ConfigOffReserved, ""),
	)
}

func doorbellStructs() []cStruct {
	return []cStruct{
		handStruct("device_page", "Start of the device page (offset 0 of the region), device-written.", nil, 16, nil, "### 6.3 Device page",
			hf("engine_flags", "", DevPageOffEngineFlags, "DevPageOffEngineFlags", "__le32", 0, "VSTELLAR_ENGINE_IDLE"),
			hf("reserved", "", DevPageOffEngineFlags+4, "", "__le32", 0, ""),
			hf("wakeups", "", DevPageOffWakeups, "DevPageOffWakeups", "__le64", 0, "statistics only")),
		handStruct("qp_doorbell", "QP doorbell record: free-running counters; the driver stores the\nproducers (release), the device the consumers.", nil, DoorbellRecordSize, nil, "### 6.4 QP doorbell record",
			hf("sq_prod", "", QPDoorbellOffSQProd, "QPDoorbellOffSQProd", "__le32", 0, "driver"),
			hf("rq_prod", "", QPDoorbellOffRQProd, "QPDoorbellOffRQProd", "__le32", 0, "driver"),
			hf("sq_cons", "", QPDoorbellOffSQCons, "QPDoorbellOffSQCons", "__le32", 0, "device"),
			hf("rq_cons", "", QPDoorbellOffRQCons, "QPDoorbellOffRQCons", "__le32", 0, "device"),
			hf("reserved", "", QPDoorbellOffRQCons+4, "", "__u8", DoorbellRecordSize-QPDoorbellOffRQCons-4, "")),
		handStruct("cq_doorbell", "CQ doorbell record.", nil, DoorbellRecordSize, nil, "### 6.5 CQ doorbell record",
			hf("prod", "", CQDoorbellOffProd, "CQDoorbellOffProd", "__le32", 0, "device: CQEs written"),
			hf("cons", "", CQDoorbellOffCons, "CQDoorbellOffCons", "__le32", 0, "driver: CQEs consumed"),
			hf("arm", "", CQDoorbellOffArm, "CQDoorbellOffArm", "__le32", 0, "driver: vstellar_cq_arm_word()"),
			hf("arm_ack", "", CQDoorbellOffArmAck, "CQDoorbellOffArmAck", "__le32", 0, "device: last arm_sn served"),
			hf("reserved", "", CQDoorbellOffArmAck+4, "", "__u8", DoorbellRecordSize-CQDoorbellOffArmAck-4, "")),
		handStruct("srq_doorbell", "SRQ doorbell record (ABI 1.1).", nil, DoorbellRecordSize, nil, "### 6.7 SRQ doorbell record",
			hf("prod", "", SRQDoorbellOffProd, "SRQDoorbellOffProd", "__le32", 0, "driver: receive WQEs posted"),
			hf("cons", "", SRQDoorbellOffCons, "SRQDoorbellOffCons", "__le32", 0, "device: WQEs taken; slots free"),
			hf("reserved", "", SRQDoorbellOffCons+4, "", "__u8", DoorbellRecordSize-SRQDoorbellOffCons-4, "")),
	}
}

func deviceAttrStruct() cStruct {
	return handStruct("device_attr", "QUERY_DEVICE response.", DeviceAttr{}, DeviceAttrSize, marshalOf, "**DeviceAttr** (160 bytes)",
		hf("fw_version", "FWVersion", attrOffFWVersion, "", "__le64", 0, "major << 32 | minor << 16 | patch"),
		hf("node_guid", "NodeGUID", attrOffNodeGUID, "", "__le64", 0, ""),
		hf("sys_image_guid", "SysImageGUID", attrOffSysImageGUID, "", "__le64", 0, ""),
		hf("max_mr_size", "MaxMRSize", attrOffMaxMRSize, "", "__le64", 0, ""),
		hf("page_size_cap", "PageSizeCap", attrOffPageSizeCap, "", "__le64", 0, ""),
		hf("device_cap_flags", "DeviceCapFlags", attrOffDeviceCapFlags, "", "__le64", 0, "VSTELLAR_DEV_CAP_*"),
		hf("vendor_id", "VendorID", attrOffVendorID, "", "__le32", 0, ""),
		hf("vendor_part_id", "VendorPartID", attrOffVendorPartID, "", "__le32", 0, ""),
		hf("hw_ver", "HWVer", attrOffHWVer, "", "__le32", 0, ""),
		hf("max_qp", "MaxQP", attrOffMaxQP, "", "__le32", 0, ""),
		hf("max_qp_wr", "MaxQPWR", attrOffMaxQPWR, "", "__le32", 0, ""),
		hf("max_sge", "MaxSGE", attrOffMaxSGE, "", "__le32", 0, ""),
		hf("max_sge_rd", "MaxSGERd", attrOffMaxSGERd, "", "__le32", 0, ""),
		hf("max_cq", "MaxCQ", attrOffMaxCQ, "", "__le32", 0, ""),
		hf("max_cqe", "MaxCQE", attrOffMaxCQE, "", "__le32", 0, ""),
		hf("max_mr", "MaxMR", attrOffMaxMR, "", "__le32", 0, ""),
		hf("max_pd", "MaxPD", attrOffMaxPD, "", "__le32", 0, ""),
		hf("max_qp_rd_atom", "MaxQPRdAtom", attrOffMaxQPRdAtom, "", "__le32", 0, ""),
		hf("max_qp_init_rd_atom", "MaxQPInitRdAtom", attrOffMaxQPInitRdAt, "", "__le32", 0, ""),
		hf("max_ah", "MaxAH", attrOffMaxAH, "", "__le32", 0, ""),
		hf("max_inline_data", "MaxInlineData", attrOffMaxInlineData, "", "__le32", 0, ""),
		hf("atomic_cap", "AtomicCap", attrOffAtomicCap, "", "__u8", 0, "VSTELLAR_ATOMIC_*"),
		hf("phys_port_cnt", "PhysPortCnt", attrOffPhysPortCnt, "", "__u8", 0, ""),
		hf("local_ca_ack_delay", "LocalCAAckDelay", attrOffLocalCAAckDel, "", "__u8", 0, ""),
		hf("reserved0", "", attrOffReserved0, "", "__u8", 0, ""),
		hf("max_srq", "MaxSRQ", attrOffMaxSRQ, "", "__le32", 0, "ABI 1.1"),
		hf("max_srq_wr", "MaxSRQWR", attrOffMaxSRQWR, "", "__le32", 0, ""),
		hf("max_srq_sge", "MaxSRQSGE", attrOffMaxSRQSGE, "", "__le32", 0, ""),
		hf("reserved", "", attrOffReserved, "", "__u8", DeviceAttrSize-attrOffReserved, ""),
	)
}

func sendWQEStruct() cStruct {
	return handStruct("send_wqe", "Send WQE header; num_sge SGEs or inline_len bytes follow at 0x40.", SendWQE{}, SendWQEHeaderSize, putOf[SendWQE](SendWQEHeaderSize), "### 10.2 Send WQE",
		hf("wr_id", "WRID", 0x00, "", "__le64", 0, ""),
		hf("opcode", "Opcode", 0x08, "", "__u8", 0, "VSTELLAR_WR_*"),
		hf("send_flags", "Flags", 0x09, "", "__u8", 0, "VSTELLAR_SEND_*"),
		hf("num_sge", "NumSGE", 0x0a, "", "__le16", 0, "0 with INLINE"),
		hf("imm_data", "Imm", 0x0c, "", "__le32", 0, "WITH_IMM opcodes, as written"),
		hf("remote_addr", "RemoteAddr", 0x10, "", "__le64", 0, ""),
		hf("rkey", "RKey", 0x18, "", "__le32", 0, ""),
		hf("inline_len", "InlineLen", 0x1c, "", "__le32", 0, "0 without INLINE"),
		hf("compare_add", "CompareAdd", 0x20, "", "__le64", 0, ""),
		hf("swap", "Swap", 0x28, "", "__le64", 0, ""),
		hf("ah", "AH", 0x30, "", "__le32", 0, "UD only, reserved"),
		hf("remote_qpn", "RemoteQPN", 0x34, "", "__le32", 0, "UD only, reserved"),
		hf("remote_qkey", "RemoteQKey", 0x38, "", "__le32", 0, "UD only, reserved"),
		hf("reserved", "", 0x3c, "", "__le32", 0, ""),
	)
}

func cqeStruct() cStruct {
	return handStruct("cqe", "Completion queue entry, device-written.", CQE{}, CQESize, putOf[CQE](CQESize), "### 10.4 CQE",
		hf("wr_id", "WRID", 0x00, "", "__le64", 0, ""),
		hf("status", "Status", 0x08, "", "__u8", 0, "VSTELLAR_WC_* status"),
		hf("opcode", "Opcode", 0x09, "", "__u8", 0, "VSTELLAR_WC_* opcode"),
		hf("wc_flags", "Flags", 0x0a, "", "__le16", 0, "VSTELLAR_WC_WITH_IMM"),
		hf("byte_len", "ByteLen", 0x0c, "", "__le32", 0, ""),
		hf("imm_data", "Imm", 0x10, "", "__le32", 0, ""),
		hf("qp_num", "QPN", 0x14, "", "__le32", 0, ""),
		hf("src_qp", "SrcQP", 0x18, "", "__le32", 0, ""),
		hf("vendor_err", "VendorErr", 0x1c, "", "__le32", 0, ""),
	)
}
