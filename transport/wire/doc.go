// Package wire is the vStellar transport's on-the-wire packet format,
// version 4: the encoders that lay packets out and Parse, which checks every
// field of a received datagram before anything else looks at it. It holds
// pure functions and no state; docs/wire.md is its prose form and the tests
// pin each documented byte offset, so the two cannot drift apart.
//
// A packet is one UDP datagram payload: a 40-byte common header, then a
// 40-byte DATA part followed by its payload, or a 64-byte ACK part. All
// multi-byte integers are big-endian; the ACK's SACK bitmap is a byte
// string (bit i is bit i%8 of byte i/8).
//
// Invariants:
//   - Parse never panics and never allocates, whatever the input: a peer
//     (or anything on the path) controls every byte, and a flood of bad
//     datagrams must cost no more than dropping and counting them.
//   - Parse validates every field: magic, version, type, flags allowed for
//     the type, every reserved field zero, lengths exactly matching the
//     datagram, a known op, the per-op rules (which fields an op may use,
//     atomic sizes and alignment, READ_REQ without payload), and
//     offset+payload_len <= msg_len <= MaxMsgLen. A field an op does not
//     use must be zero, so each valid packet has exactly one encoding and
//     re-encoding a parsed packet gives back the same bytes.
//   - Parse leaves *p untouched when it fails; its errors wrap ErrMalformed
//     and, for an unknown version, also ErrVersion.
//   - The encoders append into caller-owned buffers and do not allocate
//     when dst has room. They do not validate: a caller that encodes an
//     invalid packet finds it dropped by the receiver's Parse.
//   - Sequence numbers (PSN, MSN) are 32-bit serial numbers compared with
//     SeqLess (RFC 1982), so streams survive wrap-around.
//
// Authentication is not this package's job: tenant, conn and token are
// carried and range-checked here, and matched against live connections by
// the transport (see docs/wire.md, "Security model").
package wire
