package engine

import "github.com/vstellar/vstellar/virtio/abi"

// Hooks for the external tests (package engine_test), which drive the
// engine through enginetest and so cannot reach its internals otherwise.

// SetBeforeStateCAS installs fn to run inside ModifyQP between the state
// check and the state change.
func (e *Engine) SetBeforeStateCAS(fn func(qpn uint32)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.beforeStateCAS = fn
}

// SetQuiet installs fn to run whenever the control path holds the gate
// exclusively with nothing in flight (lockQuiet).
func (e *Engine) SetQuiet(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.quiet = fn
}

// FailQP moves a QP to ERR the way the data path does (QP_FATAL). It
// takes no lock, as on the data path, so it may run inside a hook.
func (e *Engine) FailQP(qpn uint32) {
	if q := e.objs.qp(qpn); q != nil {
		q.fail(abi.WCFatalErr)
	}
}

// BreakCQ puts a CQ in error the way a lost ring does, but without
// moving its QPs to ERR: the state a QP created or racing past cqFailed
// would find.
func (e *Engine) BreakCQ(cqn uint32) {
	if c := e.objs.cq(cqn); c != nil {
		c.mu.Lock()
		c.broken = true
		c.mu.Unlock()
	}
}

// SetCores moves a stopped engine onto c (nil: a thread of its own) from
// its next Start, as Config.Cores would have: enginetest creates engines
// without Cores.
func (e *Engine) SetCores(c *Cores) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c == nil {
		c = privateCores(e.log)
	}
	e.cores = c
}
