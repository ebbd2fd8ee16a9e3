package realvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/hotplug"
)

// GuestProgram is the guest program's package: /init of the VMs that
// BuildGuestImage packs.
const GuestProgram = "github.com/vstellar/vstellar/cmd/vstellar-guest"

// AgentServing is what the guest program prints on its console once its
// agent serves on ttyS1.
const AgentServing = "agent serving on"

// BuildGuestImage builds the guest program (static, go build from the
// current module) into dir and packs it with the kernel's modules into
// dir/initrd.cpio, whose path it returns.
func (e *Env) BuildGuestImage(ctx context.Context, dir string) (string, error) {
	bin, err := buildGuestProgram(ctx, dir)
	if err != nil {
		return "", err
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := e.Initramfs(initrd, bin); err != nil {
		return "", err
	}
	return initrd, nil
}

// buildGuestProgram builds the guest program (static) into dir.
func buildGuestProgram(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "vstellar-guest")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, GuestProgram)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("realvm: building the guest program: %v\n%s", err, out)
	}
	return bin, nil
}

// GuestConfig is a VM on the named QEMU booting initrd (BuildGuestImage)
// with the guest program in agent mode, 1 GiB of RAM and devs
// cold-plugged. The caller may adjust it before Start.
func (e *Env) GuestConfig(qemu, initrd string, devs ...hotplug.Spec) (Config, error) {
	cfg, err := e.Config(qemu)
	if err != nil {
		return Config{}, err
	}
	cfg.Initrd = initrd
	cfg.Memory = 1 << 30
	cfg.Devices = devs
	cfg.Append = fmt.Sprintf("vstellar.devid=%d vstellar.mode=agent", cfg.QEMU.VirtioID)
	return cfg, nil
}

// Guest is a running VM whose guest program serves the verbs agent.
type Guest struct {
	VM    *VM
	Agent *agent.Client
	// Info is the agent's first answer; Info.ReadyMicros is the guest
	// program's own device-ready time.
	Info agent.InfoReply
	// Ready is from QEMU's start to the agent's first answer.
	Ready time.Duration
}

// BootGuest starts cfg (GuestConfig) and waits, within ctx, until its
// agent answers. The VM lives until ctx ends or Close; on error it is
// killed already.
func BootGuest(ctx context.Context, cfg Config) (*Guest, error) {
	vm, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c, info, err := DialAgent(ctx, vm)
	if err != nil {
		vm.Kill()
		vm.Wait()
		return nil, err
	}
	return &Guest{VM: vm, Agent: c, Info: info, Ready: time.Since(vm.Started())}, nil
}

// Close closes the agent's connection and stops the VM.
func (g *Guest) Close(ctx context.Context) error {
	return errors.Join(g.Agent.Close(), g.VM.Stop(ctx))
}

// DialAgent waits for the guest program to serve its agent, connects to
// it and waits for its first answer.
func DialAgent(ctx context.Context, vm *VM) (*agent.Client, agent.InfoReply, error) {
	// The guest's serial port drops what arrives before the agent opens
	// it, so wait for the guest to say it serves.
	if _, err := vm.WaitSerial(ctx, AgentServing); err != nil {
		return nil, agent.InfoReply{}, fmt.Errorf("guest agent did not start: %w", err)
	}
	conn, err := vm.Agent(ctx)
	if err != nil {
		return nil, agent.InfoReply{}, fmt.Errorf("agent: %w", err)
	}
	c := agent.NewClient(conn)
	for {
		info, err := c.Info(ctx)
		if err == nil {
			return c, info, nil
		}
		if ctx.Err() != nil {
			c.Close()
			return nil, agent.InfoReply{}, vm.failure(fmt.Errorf("agent never answered: %w", err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
