package agent

import "context"

// rpcAgent is the remote API as net/rpc sees it: each method is one call,
// "Agent.<Method>", answered by the Service. Errors go out through
// wireError so that the device's status reaches the Client.
type rpcAgent struct {
	s   *Service
	ctx context.Context // ends with Serve
}

func (r *rpcAgent) Info(_ *Empty, out *InfoReply) (err error) {
	*out, err = r.s.info(r.ctx)
	return wireError(err)
}

func (r *rpcAgent) Setup(a *SetupArgs, out *SetupReply) (err error) {
	*out, err = r.s.setup(r.ctx, *a)
	return wireError(err)
}

func (r *rpcAgent) Reset(_ *Empty, _ *Empty) error { return wireError(r.s.reset(r.ctx)) }

func (r *rpcAgent) Connect(a *ConnectArgs, _ *Empty) error {
	return wireError(r.s.connect(r.ctx, a.Peer))
}

func (r *rpcAgent) Fill(a *FillArgs, _ *Empty) error { return wireError(r.s.fill(*a)) }

func (r *rpcAgent) Store(a *StoreArgs, _ *Empty) error { return wireError(r.s.store(*a)) }

func (r *rpcAgent) Read(a *RangeArgs, out *ReadReply) (err error) {
	*out, err = r.s.read(*a)
	return wireError(err)
}

func (r *rpcAgent) Digest(a *RangeArgs, out *DigestReply) (err error) {
	*out, err = r.s.digest(*a)
	return wireError(err)
}

func (r *rpcAgent) PostSend(a *PostSendArgs, _ *Empty) error { return wireError(r.s.postSend(*a)) }

func (r *rpcAgent) PostRecv(a *PostRecvArgs, _ *Empty) error { return wireError(r.s.postRecv(*a)) }

func (r *rpcAgent) Poll(a *PollArgs, out *PollReply) (err error) {
	*out, err = r.s.poll(r.ctx, *a)
	return wireError(err)
}

func (r *rpcAgent) RegMRAt(a *RegMRAtArgs, out *RegMRAtReply) (err error) {
	*out, err = r.s.regMRAt(r.ctx, *a)
	return wireError(err)
}

func (r *rpcAgent) WriteBandwidth(a *BandwidthArgs, out *BandwidthReply) (err error) {
	*out, err = r.s.bandwidth(r.ctx, *a)
	return wireError(err)
}

func (r *rpcAgent) PingPong(a *PingArgs, out *PingReply) (err error) {
	*out, err = r.s.pingPong(r.ctx, *a)
	return wireError(err)
}

func (r *rpcAgent) Echo(a *EchoArgs, out *EchoReply) (err error) {
	*out, err = r.s.echo(r.ctx, *a)
	return wireError(err)
}

func (r *rpcAgent) StreamStart(a *StreamArgs, _ *Empty) error {
	return wireError(r.s.streamStart(r.ctx, *a))
}

func (r *rpcAgent) StreamStatus(_ *Empty, out *StreamStatus) (err error) {
	*out, err = r.s.streamStatus()
	return wireError(err)
}

func (r *rpcAgent) StreamStop(_ *Empty, out *StreamResult) (err error) {
	*out, err = r.s.streamStop(r.ctx)
	return wireError(err)
}
