package vhost

import (
	"errors"
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
)

// route describes how one request is checked and handled. The dispatcher
// enforces the descriptor count and the protocol feature before calling
// the handler, and answers for every handler in one place.
type route struct {
	handle func(s *session, m *Message) (reply []byte, err error)
	// reply: the request has a reply body of its own (GET_*). On error
	// the body is empty, which every front-end rejects.
	reply bool
	// minFDs/maxFDs bound the descriptors the message may carry.
	minFDs, maxFDs int
	// proto is the mask of protocol features the request needs.
	proto uint64
	// unowned: the request may come before SET_OWNER. QEMU sends these
	// first (GET_FEATURES, the protocol features, GET_QUEUE_NUM,
	// SET_BACKEND_REQ_FD: internal/sim/vmsim/testdata/trace-*.txt);
	// everything that changes or reads the device's session waits for an
	// owner.
	unowned bool
}

var routes map[Request]route

func init() {
	// Set up in init: handlers refer back to the table through dispatch.
	routes = map[Request]route{
		ReqGetFeatures:         {handle: (*session).getFeatures, reply: true, unowned: true},
		ReqSetFeatures:         {handle: (*session).setFeatures},
		ReqSetOwner:            {handle: (*session).setOwner, unowned: true},
		ReqResetOwner:          {handle: (*session).resetOwner},
		ReqGetProtocolFeatures: {handle: (*session).getProtocolFeatures, reply: true, unowned: true},
		ReqSetProtocolFeatures: {handle: (*session).setProtocolFeatures, unowned: true},
		ReqGetQueueNum:         {handle: (*session).getQueueNum, reply: true, proto: ProtoMQ.Mask(), unowned: true},
		ReqGetMaxMemSlots:      {handle: (*session).getMaxMemSlots, reply: true, proto: ProtoConfigureMemSlots.Mask(), unowned: true},
		ReqSetMemTable:         {handle: (*session).setMemTable, minFDs: 1, maxFDs: maxFDs},
		ReqAddMemReg:           {handle: (*session).addMemReg, minFDs: 1, maxFDs: 1, proto: ProtoConfigureMemSlots.Mask()},
		// REM_MEM_REG: "No file descriptors SHOULD be passed"; the
		// back-end MAY accept one and must close it.
		ReqRemMemReg:       {handle: (*session).remMemReg, maxFDs: 1, proto: ProtoConfigureMemSlots.Mask()},
		ReqSetVringNum:     {handle: (*session).setVringNum},
		ReqSetVringAddr:    {handle: (*session).setVringAddr},
		ReqSetVringBase:    {handle: (*session).setVringBase},
		ReqGetVringBase:    {handle: (*session).getVringBase, reply: true},
		ReqSetVringKick:    {handle: (*session).setVringKick, maxFDs: 1},
		ReqSetVringCall:    {handle: (*session).setVringCall, maxFDs: 1},
		ReqSetVringErr:     {handle: (*session).setVringErr, maxFDs: 1},
		ReqSetVringEnable:  {handle: (*session).setVringEnable},
		ReqSetBackendReqFD: {handle: (*session).setBackendReqFD, minFDs: 1, maxFDs: 1, proto: ProtoBackendReq.Mask(), unowned: true},
		ReqGetConfig:       {handle: (*session).getConfig, reply: true, proto: ProtoConfig.Mask()},
		ReqSetConfig:       {handle: (*session).setConfig, proto: ProtoConfig.Mask()},
		ReqSetStatus:       {handle: (*session).setStatus, proto: ProtoStatus.Mask()},
		ReqGetStatus:       {handle: (*session).getStatus, reply: true, proto: ProtoStatus.Mask()},
		ReqResetDevice:     {handle: (*session).resetDevice, proto: ProtoResetDevice.Mask()},
		ReqGetInflightFD:   {handle: (*session).getInflightFD, reply: true, proto: ProtoInflightShmFD.Mask()},
		ReqSetInflightFD:   {handle: (*session).setInflightFD, minFDs: 1, maxFDs: 1, proto: ProtoInflightShmFD.Mask()},
		ReqGetShmemConfig:  {handle: (*session).getShmemConfig, reply: true, proto: ProtoShmem.Mask()},
	}
}

// alwaysReplies lists requests we do not serve whose definitions promise
// a reply body: a front-end that sends one waits for an answer, so it gets
// a u64 error rather than silence.
var alwaysReplies = map[Request]bool{
	ReqIOTLBMsg: true, ReqCreateCryptoSession: true, ReqPostcopyAdvise: true, ReqPostcopyEnd: true,
	ReqGetSharedObject: true, ReqSetDeviceStateFD: true, ReqCheckDeviceState: true,
}

// ErrUnsupported is wrapped by errors for requests this back-end does not
// serve.
var ErrUnsupported = errors.New("unsupported request")

// ErrNoOwner is wrapped by errors for session requests that come before
// SET_OWNER (or after RESET_OWNER).
var ErrNoOwner = errors.New("no SET_OWNER yet")

// ackError is the non-zero REPLY_ACK value for a failed request.
const ackError = 1

// dispatch handles one message and sends whatever reply it owes. Handler
// errors become error replies; only failures to write a reply end the
// connection.
func (s *session) dispatch(m *Message) error {
	defer m.Close()
	req := Request(m.Request)
	r, known := routes[req]
	var reply []byte
	var err error
	switch {
	case !known:
		err = fmt.Errorf("%v: %w", req, ErrUnsupported)
	case m.NumFDs() < r.minFDs || m.NumFDs() > r.maxFDs:
		err = fmt.Errorf("%v: %d file descriptors, want %d..%d: %w", req, m.NumFDs(), r.minFDs, r.maxFDs, ErrBadPayload)
	case s.protoFeatures()&r.proto != r.proto:
		err = fmt.Errorf("%v: protocol features %#x %w", req, r.proto, ErrNotNegotiated)
	case !r.unowned && !s.owned:
		err = fmt.Errorf("%v: %w", req, ErrNoOwner)
	default:
		reply, err = s.handle(r, m)
	}
	if err != nil {
		s.b.stats.FailedMsgs.Add(1)
		s.log.Warn("request failed", "req", req.String(), "err", err)
	} else {
		s.log.Debug("request", "req", req.String(), "size", m.Size)
	}

	if werr := s.answer(m, r, known, reply, err); werr != nil {
		return werr
	}
	// Work that must follow the reply: the front-end may be blocked
	// waiting for it and unable to serve the back-end channel until then.
	s.runAfterReply()
	return nil
}

// handle runs the request's handler. Some handlers touch guest memory (a
// ring's indices when it is configured or stopped): a fault there, in
// memory the front-end shrank, fails the request and needs a device reset,
// as on a ring.
func (s *session) handle(r route, m *Message) (reply []byte, err error) {
	err = guestmem.Guard(func() error {
		var herr error
		reply, herr = r.handle(s, m)
		return herr
	})
	if fe, ok := errors.AsType[*guestmem.FaultError](err); ok {
		s.markNeedsReset()
		return nil, fmt.Errorf("%v: %w", Request(m.Request), fe)
	}
	return reply, err
}

// answer sends the reply a request is owed: its own reply body, a u64 error
// for an unserved request that promises one, or a REPLY_ACK when asked for.
func (s *session) answer(m *Message, r route, known bool, reply []byte, err error) error {
	hdr := Header{Request: m.Request, Flags: flagVersion | flagReply}
	switch {
	case known && r.reply:
		fds := s.takeReplyFDs()
		defer closeAll(fds)
		if err != nil {
			reply, fds = nil, nil
		}
		return s.conn.write(hdr, reply, fds)
	case !known && alwaysReplies[Request(m.Request)]:
		return s.conn.write(hdr, encodeU64(ackError), nil)
	case m.NeedReply() && s.hasProto(ProtoReplyAck):
		var ack uint64
		if err != nil {
			ack = ackError
		}
		return s.conn.write(hdr, encodeU64(ack), nil)
	}
	return nil
}
