package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/internal/testkit/daemontest"
)

func TestConcurrentCreateSameName(t *testing.T) {
	m := newManager(t, testConfig(t, &daemontest.Factory{}))
	var ok, exists atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "same"})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, api.ErrExists):
				exists.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || exists.Load() != 15 {
		t.Fatalf("%d created, %d refused", ok.Load(), exists.Load())
	}
}

func TestConcurrentCreateDestroyManyDevices(t *testing.T) {
	r := run(t, testConfig(t, &daemontest.Factory{}))
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("dev%d", i)
			for range 5 {
				if _, err := r.client.CreateDevice(ctx, api.DeviceSpec{Name: name}); err != nil {
					t.Error(err)
					return
				}
				ping(t, dial(t, r.m.SocketPath(name)))
				if err := r.client.DestroyDevice(ctx, name); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(r.m.Devices()); n != 0 {
		t.Fatalf("%d devices left", n)
	}
}

func TestFactoryPanicInAPIKeepsNameFree(t *testing.T) {
	var panics atomic.Bool
	panics.Store(true)
	f := &daemontest.Factory{Err: func(api.DeviceSpec) error {
		if panics.Load() {
			panic("factory bug")
		}
		return nil
	}}
	r := run(t, testConfig(t, f))
	if _, err := r.client.CreateDevice(context.Background(), api.DeviceSpec{Name: "p"}); err == nil {
		t.Fatal("create with a panicking factory succeeded")
	}
	panics.Store(false)
	if _, err := r.client.CreateDevice(context.Background(), api.DeviceSpec{Name: "p"}); err != nil {
		t.Fatalf("name left reserved after a panic: %v", err)
	}
}
