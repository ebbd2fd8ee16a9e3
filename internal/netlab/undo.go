//go:build linux

package netlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// undoStack records how to take apart what has been built, so that a failed
// construction and Close share one teardown path and run it in reverse order
// of creation.
type undoStack struct {
	steps []undoStep
}

type undoStep struct {
	what string
	fn   func() error
}

func (u *undoStack) push(what string, fn func() error) {
	u.steps = append(u.steps, undoStep{what: what, fn: fn})
}

// run undoes every recorded step, newest first. It keeps going past failures
// (so one stuck piece does not leave the rest behind) and reports them all.
func (u *undoStack) run() error {
	var errs []error
	for i := len(u.steps) - 1; i >= 0; i-- {
		s := u.steps[i]
		if err := s.fn(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", s.what, err))
		}
	}
	u.steps = nil
	return errors.Join(errs...)
}

// unwindOnError runs the stack if *errp is set: a build's deferred
// cleanup, so a failure at any step leaves nothing behind.
func (u *undoStack) unwindOnError(errp *error, log *slog.Logger) {
	if *errp == nil {
		return
	}
	if uerr := u.run(); uerr != nil {
		*errp = errors.Join(*errp, fmt.Errorf("netlab: cleanup after failed build: %w", uerr))
	}
	log.Debug("netlab: build failed", "err", *errp)
}

// stepper returns what a build calls after each step: it stops the build
// once ctx is done, and runs the test hook (which may inject a failure).
func stepper(ctx context.Context, log *slog.Logger, hook func(string) error) func(string) error {
	return func(name string) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("netlab: build interrupted after %s: %w", name, err)
		}
		log.Debug("netlab: built", "step", name)
		if hook != nil {
			if err := hook(name); err != nil {
				return fmt.Errorf("netlab: after %s: %w", name, err)
			}
		}
		return nil
	}
}
