// Package realvm is a test rig, not product: it boots real QEMU VMs with a
// real Debian guest kernel so that tests (and demos) can drive vstellard
// from an actual guest under an actual VMM.
//
// prepare.sh (run once as root) fetches and builds what it needs into a
// cache directory and describes it in manifest.json: stock QEMU 11.1.3
// from a Debian sid root, QEMU 10.2.2 patched to name virtio id 42, and
// trixie's 6.12 kernel with the uio modules. Load and Require read that
// manifest; BuildInitramfs packs a guest program as /init; Start runs one
// QEMU (TCG) with vhost-user devices, its serial console captured, a
// second serial port as the guest agent's channel and QMP, and every VM is
// stopped by its pid. In a test:
//
//	env := realvm.Require(t) // skips, or fails under CI=true, if not prepared
//	env.Initramfs(initrd, guestBinary)
//	cfg, _ := env.Config(realvm.StockQEMU)
//	cfg.Initrd = initrd
//	cfg.Devices = []hotplug.Spec{{Socket: sock}} // the QEMU's virtio id
//	vm, err := realvm.Start(t.Context(), cfg)
//	t.Cleanup(func() { vm.Kill(); vm.Wait() })
//	line, err := vm.WaitSerial(ctx, "ready")
//
// For VMs running the guest program (cmd/vstellar-guest) with its verbs
// agent, as the real-VM tests and vstellar-bench realvm do:
// Env.BuildGuestImage, Env.GuestConfig, then BootGuest (or Start and
// DialAgent).
package realvm
