// Package citest tests the shell functions .ci/run uses.
package citest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestHasBackports: .ci/run adds a backports source only when the
// machine lists none, in either of apt's forms; a duplicate would make
// apt refuse every command.
func TestHasBackports(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash on this machine")
	}
	script, err := filepath.Abs("../../.ci/apt-backports.sh")
	if err != nil {
		t.Fatal(err)
	}
	deb822 := "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"none", map[string]string{"sources.list": "deb http://deb.debian.org/debian bookworm main\n"}, false},
		{"one-line", map[string]string{"sources.list": "deb http://deb.debian.org/debian bookworm-backports main\n"}, true},
		{"one-line with options", map[string]string{"sources.list.d/b.list": "deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm-backports main\n"}, true},
		{"commented", map[string]string{"sources.list": "# deb http://deb.debian.org/debian bookworm-backports main\n"}, false},
		{"deb822 several suites", map[string]string{"sources.list.d/debian.sources": deb822}, true},
		{"deb822 without backports", map[string]string{"sources.list.d/debian.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"}, false},
		{"deb822 in a file apt ignores", map[string]string{"sources.list.d/debian.sources.save": deb822}, false},
		{"updates only", map[string]string{"sources.list": "deb http://deb.debian.org/debian bookworm-updates main\n"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range tc.files {
				path := filepath.Join(root, "etc/apt", name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := exec.Command("bash", "-c", `. "$0" && has_backports "$1"`, script, root).Run()
			if got := err == nil; got != tc.want {
				t.Fatalf("has_backports = %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}
