package guestdriver

import (
	"context"
	"errors"
	"testing"

	"github.com/vstellar/vstellar/virtio/abi"
)

func goodConfig(t *testing.T, mut func(*abi.Config)) []byte {
	t.Helper()
	db, err := abi.NewDoorbellLayout(abi.DefaultLimits, 4096)
	if err != nil {
		t.Fatal(err)
	}
	c := abi.Config{ABIVersion: abi.ABIVersion, Limits: abi.DefaultLimits, PhysPortCnt: 1, Doorbell: db}
	if mut != nil {
		mut(&c)
	}
	b, _ := c.MarshalBinary()
	return b
}

func TestOpenValidatesConfig(t *testing.T) {
	ctx := context.Background()
	ft := &fakeTransport{config: goodConfig(t, nil)}
	if _, err := Open(ctx, ft); err != nil {
		t.Fatal(err)
	}
	if ft.resets != 1 {
		t.Fatalf("Open sent RESET_STATE %d times, want once", ft.resets)
	}
	for name, ft := range map[string]*fakeTransport{
		"short":          {config: goodConfig(t, nil)[:100]},
		"abi 2.0":        {config: goodConfig(t, func(c *abi.Config) { c.ABIVersion = 2 << 16 })},
		"zero limits":    {config: goodConfig(t, func(c *abi.Config) { c.Limits = abi.Limits{} })},
		"bad doorbells":  {config: goodConfig(t, func(c *abi.Config) { c.Doorbell.Pages = 1 })},
		"transport fail": {err: errors.New("gone")},
	} {
		if _, err := Open(ctx, ft); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	_, err := Open(ctx, &fakeTransport{config: goodConfig(t, func(c *abi.Config) { c.ABIVersion = 3 << 16 })})
	if !errors.Is(err, abi.ErrVersion) {
		t.Errorf("version error not wrapped: %v", err)
	}
}

func TestQueryDeviceResponses(t *testing.T) {
	ctx := context.Background()
	attr := abi.DeviceAttr{MaxQP: 7, NodeGUID: 0x42}
	body, _ := attr.MarshalBinary()
	ft := &fakeTransport{config: goodConfig(t, nil), resp: abi.AppendResponse(nil, abi.StatusOK, body)}
	d, err := Open(ctx, ft)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.QueryDevice(ctx)
	if err != nil || got != attr {
		t.Fatalf("QueryDevice = %+v, %v", got, err)
	}
	if want := abi.AppendRequest(nil, abi.OpQueryDevice, nil); string(ft.lastReq) != string(want) || ft.respLen != 168 {
		t.Fatalf("request %x respLen %d", ft.lastReq, ft.respLen)
	}
	for name, c := range map[string]struct {
		resp []byte
		is   error
	}{
		"status":          {abi.AppendResponse(nil, abi.StatusNotSupported, nil), abi.StatusNotSupported},
		"short response":  {abi.AppendResponse(nil, abi.StatusOK, body[:10]), abi.ErrBadLength},
		"long response":   {abi.AppendResponse(nil, abi.StatusOK, append(body, 0)), abi.ErrBadLength},
		"no header":       {[]byte{0, 0}, abi.ErrShortBuffer},
		"unknown status":  {abi.AppendResponse(nil, 1234, nil), abi.Status(1234)},
		"empty from wire": {nil, abi.ErrShortBuffer},
	} {
		ft.resp = c.resp
		if _, err := d.QueryDevice(ctx); !errors.Is(err, c.is) {
			t.Errorf("%s: err %v, want %v", name, err, c.is)
		}
	}
	var se *abi.StatusError
	ft.resp = abi.AppendResponse(nil, abi.StatusBusy, nil)
	if _, err := d.QueryDevice(ctx); !errors.As(err, &se) || se.Op != abi.OpQueryDevice || se.Status != abi.StatusBusy {
		t.Errorf("StatusError: %v", err)
	}
	ft.err = errors.New("link down")
	if _, err := d.QueryDevice(ctx); err == nil {
		t.Error("transport error swallowed")
	}
}

func TestDoorbellsNeedShmemStatus(t *testing.T) {
	d, err := Open(context.Background(), &fakeTransport{config: goodConfig(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Doorbells(); !errors.Is(err, ErrNoDoorbells) {
		t.Fatalf("Doorbells with status 0: %v", err)
	}
}
