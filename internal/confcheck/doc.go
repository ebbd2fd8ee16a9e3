// Package confcheck reads what operators write as JSON (vstellard's
// config file, its flags, a device spec sent to the management API or
// given to vstellarctl) strictly, and says where a mistake is: a
// ConfigError names the source, the line and column, and the key. It
// also holds the checks of a device spec (ValidateSpec, ParseLimits),
// so that vstellarctl refuses a bad spec, naming its flag, by the same
// rules as the daemon, without linking the daemon.
//
// Like package api, it must not import the data path.
package confcheck
