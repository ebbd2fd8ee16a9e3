package guestmem

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Guard is the only code that turns memory faults into panics: code that
// set the goroutine's fault flag itself would pass the race builds' check
// (checkGuarded) without recovering the fault into an error.
func TestOnlyGuardSetsPanicOnFault(t *testing.T) {
	root := ".."
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || filepath.Dir(path) == filepath.Join(root, "guestmem") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "SetPanicOnFault(") {
			t.Errorf("%s calls debug.SetPanicOnFault: use guestmem.Guard", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
