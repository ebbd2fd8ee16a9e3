// Package agent serves the guest verbs library over a byte stream (a
// serial port of a real VM, a pipe in tests), so that a program on the
// host can drive RDMA verbs in two guests and carry their endpoints
// (GID, QPN, PSN, MR address and rkey) between them out of band, as two
// verbs applications would over TCP.
//
// The guest side is a [Service] over one opened guestdriver.Device,
// served with net/rpc and the JSON-RPC codec ([Serve]); the host side is
// a typed [Client]. The remote API is small: Info, Setup (PD, two CQs,
// an RC QP, one buffer registered as an MR) and Reset, Connect, buffer
// access by offset (Fill with a seeded [Pattern], Store, Read, Digest),
// PostSend/PostRecv with SGEs as offsets into the buffer, Poll, RegMRAt
// (to show the device refuses memory it must refuse), and loops that run
// inside the guest so that the RPC is not in what they measure: a WRITE
// bandwidth loop, an 8-byte ping-pong (PingPong on one side, Echo on the
// other) and a WRITE stream that runs until it is stopped. The host may
// also drive the device's life cycle through hooks the guest program
// provides (Options.Reboot, Options.Reopen): Reboot reboots the guest
// once its reply is out; Reopen resets the device and probes it again,
// as after a restarted vstellard.
//
// Every number a request carries is checked before use: a bad request
// gets an error, never a panic (a fuzz test feeds random JSON-RPC). An
// error the device answered with a status reaches the Client as a
// *RemoteError that unwraps to that abi.Status.
//
// The scenarios ([Scenarios], [RunVerbs]) take two Clients and return a
// [Report] (a table, or JSON); the in-process tests run them on
// simulated guests (package agentsim) and the real-VM tests run the same
// functions on QEMU guests.
//
// Files: api.go (the wire types), pattern.go, service.go (set-up and
// serving), rpc.go (the methods net/rpc calls), service_mem.go,
// service_post.go, loops.go and stream.go (the guest-side loops),
// lifecycle.go (Reboot, Reopen, Forget), errors.go, client.go, pair.go,
// scenarios.go and scenarios_loops.go, report.go.
package agent
