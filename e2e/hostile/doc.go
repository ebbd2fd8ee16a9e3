// Package hostile attacks a running vstellard from outside, as a
// hostile tenant would: a vhost-user front-end written from the protocol
// text (not on package vhost) sends malformed messages, hostile memory
// tables, broken rings and control commands, and floods of each; other
// cases abuse the management API. After every case the suite checks that
// the daemon lives, that a bystander device served to a well-behaved VM
// still answers a control command and moves data, and that the daemon's
// descriptors and RSS are back near their baseline; after every group the
// attacked device serves a well-behaved VM again.
//
// The package has only tests: go test ./e2e/hostile/ (docs/operations.md,
// "Hostile input the daemon is tested against").
package hostile
