package hotplug

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

func TestSpecDefaults(t *testing.T) {
	s := Spec{ID: "vst0", Socket: "/run/vstellar/vm1.sock"}.WithDefaults()
	if s.Driver != DefaultDriver || s.VirtioID != abi.DeviceID || s.NumQueues != abi.NumQueues ||
		s.QueueSize != abi.DefaultQueueSize || s.ConfigSize != abi.ConfigSize || s.Reconnect != 0 {
		t.Fatalf("defaults %+v", s)
	}
	if s.ChardevID() != "vst0-chr" {
		t.Fatal(s.ChardevID())
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{ID: "vst0", Socket: "/run/vstellar/vm1.sock"}
	for _, tc := range []struct {
		mod  func(*Spec)
		want string // "" for valid
	}{
		{func(s *Spec) {}, ""},
		{func(s *Spec) { s.ID = "a.b-c_D9"; s.Bus = "rp1"; s.Reconnect = 1500 * time.Millisecond }, ""},
		{func(s *Spec) {
			s.Driver = "vhost-user-test-device"
			s.VirtioID = 26
			s.NumQueues = 1
			s.QueueSize = 1024
			s.ConfigSize = 0
		}, ""},
		{func(s *Spec) { s.ID = "" }, "device id is empty"},
		{func(s *Spec) { s.ID = "9vst" }, "must start with a letter"},
		{func(s *Spec) { s.ID = "vst,0" }, "outside [A-Za-z0-9_.-] at byte 3"},
		{func(s *Spec) { s.ID = strings.Repeat("v", MaxIDLen) }, "chardev id is"},
		{func(s *Spec) { s.Bus = "-rp" }, "bus \"-rp\" must start with a letter"},
		{func(s *Spec) { s.Socket = "" }, "socket path is empty"},
		{func(s *Spec) { s.Socket = "run/vm1.sock" }, "not absolute"},
		{func(s *Spec) { s.Socket = "/" + strings.Repeat("s", 107) }, "108 bytes long"},
		{func(s *Spec) { s.Socket = "/run/a\nb" }, "NUL or newline"},
		{func(s *Spec) { s.Driver = "virtio-net-pci,netdev=x" }, "driver"},
		{func(s *Spec) { s.VirtioID = 70000 }, "virtio id 70000"},
		{func(s *Spec) { s.VirtioID = -1 }, "virtio id -1"},
		{func(s *Spec) { s.NumQueues = 2 }, "has 3 queues, not 2"},
		{func(s *Spec) { s.VirtioID = 26; s.NumQueues = 1025 }, "1025 queues"},
		{func(s *Spec) { s.QueueSize = 300 }, "queue size 300"},
		{func(s *Spec) { s.QueueSize = 2048 }, "queue size 2048"},
		{func(s *Spec) { s.QueueSize = -4 }, "queue size -4"},
		{func(s *Spec) { s.ConfigSize = 128 }, "256 bytes, not 128"},
		{func(s *Spec) { s.VirtioID = 26; s.ConfigSize = 257 }, "config size 257"},
		{func(s *Spec) { s.Reconnect = time.Microsecond }, "whole number of milliseconds"},
		{func(s *Spec) { s.Reconnect = -time.Second }, "reconnect -1s"},
		{func(s *Spec) { s.Reconnect = 48 * time.Hour }, "reconnect 48h"},
	} {
		s := ok
		tc.mod(&s)
		err := s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", s, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", s, err, tc.want)
		}
	}
}

func TestQEMUArgs(t *testing.T) {
	args, err := QEMUArgs(Memory{Size: 4 << 30}, Spec{ID: "vst0", Socket: "/run/vstellar/vm1-rdma0.sock", Reconnect: time.Second, Bus: "rp1"},
		Spec{ID: "vst1", Socket: "/tmp/a,b.sock"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-m", "4G",
		"-object", "memory-backend-memfd,id=mem,size=4G,share=on",
		"-numa", "node,memdev=mem",
		"-chardev", "socket,id=vst0-chr,path=/run/vstellar/vm1-rdma0.sock,reconnect-ms=1000",
		"-device", "vhost-user-test-device-pci,id=vst0,chardev=vst0-chr,virtio-id=42,num_vqs=3,vq_size=256,config_size=256,bus=rp1",
		"-chardev", "socket,id=vst1-chr,path=/tmp/a,,b.sock",
		"-device", "vhost-user-test-device-pci,id=vst1,chardev=vst1-chr,virtio-id=42,num_vqs=3,vq_size=256,config_size=256",
	}
	if !slices.Equal(args, want) {
		t.Fatalf("args\n%q\nwant\n%q", args, want)
	}
	for _, a := range args {
		if strings.Contains(a, "prealloc") {
			t.Fatal("prealloc defeats on-demand pinning")
		}
	}

	args, err = MemoryArgs(Memory{Size: 1536 << 20, ID: "ram0", Layout: MemMachine})
	if err != nil || !slices.Equal(args, []string{"-m", "1536M", "-object", "memory-backend-memfd,id=ram0,size=1536M,share=on", "-machine", "memory-backend=ram0"}) {
		t.Fatalf("%q %v", args, err)
	}
}

func TestQEMUArgsInvalid(t *testing.T) {
	good := Spec{ID: "vst0", Socket: "/run/vm1.sock"}
	for _, tc := range []struct {
		mem   Memory
		specs []Spec
		want  string
	}{
		{Memory{Size: 0}, nil, "outside 1 MiB..1 PiB"},
		{Memory{Size: -1 << 30}, nil, "outside"},
		{Memory{Size: 1<<30 + 4096}, nil, "not a whole number of MiB"},
		{Memory{Size: 1 << 60}, nil, "outside"},
		{Memory{Size: 1 << 30, ID: "mem,x"}, nil, "memory backend id"},
		{Memory{Size: 1 << 30, Layout: "hugepages"}, nil, "memory layout"},
		{Memory{Size: 1 << 30}, []Spec{good, good}, `device id "vst0" given twice`},
		{Memory{Size: 1 << 30}, []Spec{{ID: "vst0"}}, "socket path is empty"},
	} {
		args, err := QEMUArgs(tc.mem, tc.specs...)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || args != nil {
			t.Errorf("%+v %+v: %q %v, want %q", tc.mem, tc.specs, args, err, tc.want)
		}
	}
}
