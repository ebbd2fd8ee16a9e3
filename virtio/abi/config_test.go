package abi

import "testing"

func TestFormatGUID(t *testing.T) {
	if got, want := FormatGUID(0x0af10107b58d6690), "0af1:0107:b58d:6690"; got != want {
		t.Errorf("FormatGUID = %q, want %q", got, want)
	}
	if got, want := FormatGUID(0x2), "0000:0000:0000:0002"; got != want {
		t.Errorf("FormatGUID = %q, want %q", got, want)
	}
}
