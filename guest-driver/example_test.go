package guestdriver_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"

	"github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Two VMs on one host, each with a vStellar device of the same daemon
// (joined by an in-process fabric): VM a writes into VM b's memory with
// RDMA WRITE.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "vstellar-example")
	check(err)
	defer os.RemoveAll(dir)
	fab := fabric.NewLocal()
	vmA, stopA := exampleVM(ctx, dir, "example-a", fab)
	defer stopA()
	vmB, stopB := exampleVM(ctx, dir, "example-b", fab)
	defer stopB()

	// Inside each guest: open the device, and set up a PD, a CQ, an RC
	// QP and a registered buffer.
	type side struct {
		dev *guestdriver.Device
		cq  *guestdriver.CQ
		qp  *guestdriver.QP
		buf guestdriver.Buffer
		mr  *guestdriver.MR
	}
	setup := func(vm *vmsim.VM) *side {
		dev, err := guestdriver.Open(ctx, vmsim.NewTransport(vm))
		check(err)
		pd, err := dev.AllocPD(ctx)
		check(err)
		cq, err := dev.CreateCQ(ctx, 16)
		check(err)
		qp, err := pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: cq, RecvCQ: cq,
			Cap: guestdriver.QPCap{SQSize: 16, RQSize: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		check(err)
		buf, err := dev.Alloc(4096, 4096)
		check(err)
		mr, err := pd.RegMR(ctx, buf, abi.AccessLocalWrite|abi.AccessRemoteWrite)
		check(err)
		return &side{dev, cq, qp, buf, mr}
	}
	a, b := setup(vmA), setup(vmB)
	defer a.dev.Close()
	defer b.dev.Close()

	// Exchange GID and QP number (out of band, as over a socket), then
	// bring both QPs to RTS.
	check(a.qp.ConnectTo(ctx, b.qp.Endpoint()))
	check(b.qp.ConnectTo(ctx, a.qp.Endpoint()))

	msg := "hello from VM a"
	copy(a.buf.Bytes(), msg)
	check(a.qp.PostSend(guestdriver.SendWR{
		WRID:       1,
		Opcode:     abi.WRRDMAWrite,
		SGL:        []abi.SGE{a.mr.SGE(0, uint32(len(msg)))},
		RemoteAddr: b.mr.IOVA(),
		RKey:       b.mr.RKey(),
		Signaled:   true,
	}))

	// Wait for the completion: arm the CQ, poll once more (a completion
	// may have arrived before the arm), then sleep on its event.
	wcs := make([]guestdriver.WC, 1)
	for {
		check(a.cq.ReqNotify(false))
		if a.cq.Poll(wcs) == 1 {
			break
		}
		check(a.cq.Wait(ctx))
	}
	fmt.Println(wcs[0].Opcode, wcs[0].Status.String())
	fmt.Printf("VM b's memory: %q\n", b.buf.Bytes()[:len(msg)])
	// Output:
	// RDMA_WRITE SUCCESS
	// VM b's memory: "hello from VM a"
}

// exampleVM starts a device of the daemon on a unix socket and a
// simulated VM connected to it, and returns the VM and how to stop both.
func exampleVM(ctx context.Context, dir, name string, fab fabric.Fabric) (*vmsim.VM, func()) {
	logger := slog.New(slog.DiscardHandler)
	dev, err := device.New(device.Config{Name: name, Fabric: fab}, logger)
	check(err)
	sock := filepath.Join(dir, name+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	check(err)
	backend := vhost.NewBackend(dev, vhost.Options{Name: name, Logger: logger})
	served := make(chan struct{})
	go func() {
		defer close(served)
		conn, err := ln.AcceptUnix()
		ln.Close()
		if err == nil {
			backend.Serve(ctx, conn)
		}
	}()
	vm, err := vmsim.New(ctx, vmsim.DeviceConfig(sock, 16<<20))
	check(err)
	check(vm.Start(ctx))
	return vm, func() {
		vm.Close()
		<-served
		dev.Close()
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
