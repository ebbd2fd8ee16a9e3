package api

import "fmt"

const (
	// DefaultRunDir is where vstellard keeps the device sockets and the
	// API socket unless configured otherwise.
	DefaultRunDir = "/run/vstellar"

	// APISocketName is the management API socket, inside the run dir.
	APISocketName = "vstellard.sock"
)

// MaxNameLen is the longest accepted device name. With the ".sock" suffix
// and a run directory of up to 37 bytes (/run/vstellar is 13), every name
// fits the 108-byte sun_path limit; creating a device still checks the
// full socket path and refuses one that is too long.
const MaxNameLen = 64

// ValidateName reports whether name is an acceptable device name: 1 to
// MaxNameLen characters from [a-zA-Z0-9_.-], not "." or "..", and not
// "vstellard", whose socket would be the management API's. Such a name
// has no path separator, so "<RunDir>/<name>.sock" always names a file
// directly inside the run directory. The error wraps ErrInvalid.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: device name is empty", ErrInvalid)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: device name is %d bytes long, the limit is %d", ErrInvalid, len(name), MaxNameLen)
	case name == "." || name == ".." || name+".sock" == APISocketName:
		return fmt.Errorf("%w: device name %q is reserved", ErrInvalid, name)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: device name %q has a character outside [a-zA-Z0-9_.-] at byte %d", ErrInvalid, name, i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '-'
}
