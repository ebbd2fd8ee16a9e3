// Package verbstest builds the verbs objects most tests start from: on
// an open guest device, a PD, a CQ, an RC QP and a registered buffer
// (an End), and two Ends whose QPs are connected to each other (Pair).
// It returns errors rather than failing a test, so that the simulated
// hosts' tools can use it too; a test that needs other objects, or
// checks something between the steps, makes its own.
package verbstest

import (
	"context"
	"fmt"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Options shape an End. The zero value gives a 16-entry CQ, an RC QP of
// 8 send and 8 receive WRs with one SGE each, and a 4 KiB buffer
// registered with abi.AccessAll.
type Options struct {
	CQSize int // entries in each CQ
	// SplitCQ gives the QP a receive CQ of its own.
	SplitCQ bool
	Cap     guestdriver.QPCap
	SigAll  bool
	// BufSize is the registered buffer's size, BufAlign its alignment
	// (default 4096).
	BufSize, BufAlign uint64
	Access            abi.Access
}

// End is one guest's verbs objects. RCQ is SCQ unless Options.SplitCQ.
type End struct {
	Dev      *guestdriver.Device
	PD       *guestdriver.PD
	SCQ, RCQ *guestdriver.CQ
	QP       *guestdriver.QP
	Buf      guestdriver.Buffer
	MR       *guestdriver.MR
}

// New makes an End on d. The objects live until d closes (or the test
// destroys them); an error says which step failed.
func New(ctx context.Context, d *guestdriver.Device, o Options) (*End, error) {
	o.defaults()
	e := &End{Dev: d}
	var err error
	if e.PD, err = d.AllocPD(ctx); err != nil {
		return nil, fmt.Errorf("AllocPD: %w", err)
	}
	if e.SCQ, err = d.CreateCQ(ctx, o.CQSize); err != nil {
		return nil, fmt.Errorf("CreateCQ: %w", err)
	}
	e.RCQ = e.SCQ
	if o.SplitCQ {
		if e.RCQ, err = d.CreateCQ(ctx, o.CQSize); err != nil {
			return nil, fmt.Errorf("CreateCQ (receive): %w", err)
		}
	}
	if e.QP, err = e.PD.CreateQP(ctx, guestdriver.QPInit{SendCQ: e.SCQ, RecvCQ: e.RCQ, Cap: o.Cap, SigAll: o.SigAll}); err != nil {
		return nil, fmt.Errorf("CreateQP: %w", err)
	}
	if e.Buf, err = d.Alloc(o.BufSize, o.BufAlign); err != nil {
		return nil, fmt.Errorf("Alloc: %w", err)
	}
	if e.MR, err = e.PD.RegMR(ctx, e.Buf, o.Access); err != nil {
		return nil, fmt.Errorf("RegMR: %w", err)
	}
	return e, nil
}

func (o *Options) defaults() {
	if o.CQSize == 0 {
		o.CQSize = 16
	}
	if o.Cap == (guestdriver.QPCap{}) {
		o.Cap = guestdriver.QPCap{SQSize: 8, RQSize: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	}
	if o.BufSize == 0 {
		o.BufSize = 4096
	}
	if o.BufAlign == 0 {
		o.BufAlign = 4096
	}
	if o.Access == 0 {
		o.Access = abi.AccessAll
	}
}

// Connect connects a's QP to b's and b's to a's with the default RC
// attributes (QP.ConnectTo).
func Connect(ctx context.Context, a, b *End) error {
	if err := a.QP.ConnectTo(ctx, b.QP.Endpoint()); err != nil {
		return fmt.Errorf("connecting the first QP: %w", err)
	}
	if err := b.QP.ConnectTo(ctx, a.QP.Endpoint()); err != nil {
		return fmt.Errorf("connecting the second QP: %w", err)
	}
	return nil
}

// Pair makes an End on each of da and db (which may be one device) and
// connects them.
func Pair(ctx context.Context, da, db *guestdriver.Device, o Options) (a, b *End, err error) {
	if a, err = New(ctx, da, o); err != nil {
		return nil, nil, err
	}
	if b, err = New(ctx, db, o); err != nil {
		return nil, nil, err
	}
	if err := Connect(ctx, a, b); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}
