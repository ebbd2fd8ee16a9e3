//go:build linux

package netlab

import (
	"errors"
	"fmt"
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
