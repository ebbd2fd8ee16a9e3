// Package abi is the vStellar device ABI: every structure that crosses the
// guest/host boundary of the paravirtual RDMA device (virtio device id 42),
// defined once and imported by both the device model (package device) and
// the guest verbs library (package guestdriver).
//
// What it holds: the device id, virtqueue indices and feature bits; the
// configuration space layout; the per-device limits; the geometry of the
// shared-memory doorbell region; the control-queue framing (request and
// response headers, opcodes, status codes); every command payload; the
// verbs enumerations and the QP state machine; the data-path formats (send
// and receive WQEs, SGEs, CQEs, doorbell records, the device page of the
// wake-up protocol) and asynchronous events. docs/spec.md is the prose
// form of this package and is kept true to it (spec_test.go checks its
// tables).
//
// Invariants:
//   - Every structure has exactly one Go definition, a size constant, and
//     explicit little-endian encoding at fixed offsets, pinned byte for
//     byte by table tests: the hot-path formats (WQE, CQE, doorbells) are
//     encoded by hand; control payloads, off the hot path, are plain
//     structs encoded by encoding/binary in field order with explicit
//     Reserved fields for alignment (never unsafe casts). Host and guest
//     can differ in endianness and alignment rules; the wire layout
//     cannot.
//   - Decoding never panics and never trusts a length: short buffers,
//     trailing bytes, unknown opcodes and non-zero reserved fields in
//     driver-written structures are errors wrapping the sentinels in
//     errors.go. The device turns those errors into a status with
//     [StatusFor].
//   - Reserved fields: the driver must write zero to reserved fields of the
//     structures it writes (requests), and the device rejects anything
//     else, so that a later minor ABI version can give those bits a meaning
//     safely. In structures the device writes (config space, responses) the
//     driver ignores reserved fields, so that a newer device can fill them.
//   - Everything is an explicit field: no implicit padding, natural
//     alignment for every field, sizes multiples of 8.
package abi
