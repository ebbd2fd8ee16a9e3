// Package guestexec runs programs in a real VM's guest for a test on the
// host: the guest program serves a [Server] on a serial port, and the
// host calls [Client.Run] to run, say, ibv_rc_pingpong in one guest while
// it runs in another. It carries nothing but a program's arguments and
// its output; what the program does is the test's business.
//
// Calls run concurrently (net/rpc serves each in its own goroutine), so a
// host can start a server program in one call and its client in another.
// Every run has a time limit, after which the program is killed; a run
// whose caller gave up is not taken back.
package guestexec
