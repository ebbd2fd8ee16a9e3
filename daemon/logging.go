package daemon

import (
	"io"
	"log/slog"
)

// NewLogger builds the daemon's logger writing to w, with level (see
// ParseLogLevel) and format "text" or "json".
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	if err := checkLogFormat(format); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
