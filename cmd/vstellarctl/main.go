package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/vstellar/vstellar/api"
)

const defaultSocket = api.DefaultRunDir + "/" + api.APISocketName

// version is set at link time, as vstellard's: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks command-line mistakes.
var errUsage = errors.New("usage")

// errVersion is what a command given --version returns at once.
var errVersion = errors.New("version asked for")

// Exit statuses a script can rely on (docs/operations.md).
const (
	exitOK          = 0
	exitFailed      = 1 // anything not below: the daemon failed, a VMM refused
	exitUsage       = 2 // bad command line
	exitNotFound    = 3 // no such device (HTTP 404)
	exitConflict    = 4 // exists, busy, socket in use (HTTP 409)
	exitInvalid     = 5 // the daemon refused the request as invalid (HTTP 400)
	exitUnreachable = 6 // no daemon answers on the socket
	exitShutdown    = 7 // the daemon is shutting down (HTTP 503)
)

const usage = `usage: vstellarctl [--socket PATH] [--json] [--timeout DURATION] COMMAND
       vstellarctl --version

commands:
  health                               daemon health
  devices list                         list devices
  devices show NAME                    one device: connection, objects, memory, traffic
  devices qps NAME [--limit N]         a device's queue pairs
  devices mrs NAME [--limit N]         a device's memory regions
  devices create NAME [--limits JSON] [--pin MODE] [--pin-budget SIZE] [--tenant N]
                                       create a device
  devices destroy NAME                 destroy a device
  host                                 pinned memory and the cross-host fabric
  host nics                            network interfaces and RDMA devices
  host paths                           the fabric's paths and their round-trip times
  attach --qmp SOCKET (NAME | --socket-path PATH) [--id ID] [--bus BUS] [--reconnect D]
                                       hot-plug a device into a running QEMU
  detach --qmp SOCKET (NAME | --id ID) hot-unplug it (device_del, DEVICE_DELETED, chardev-remove)
  qemu-args (NAME... | --socket-path PATH) [--mem SIZE] [--mem-layout numa|machine]
            [--run-dir DIR] [--id ID] [--bus BUS] [--reconnect D]
                                       QEMU arguments to cold-plug devices

exit status: 0 ok, 1 failed, 2 usage, 3 not found, 4 conflict, 5 invalid
request, 6 daemon unreachable, 7 daemon shutting down
`

// cli is one invocation.
type cli struct {
	client  *api.Client
	json    bool
	version bool // --version: print it and do nothing else
	timeout time.Duration
	stdout  io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vstellarctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage, "\nflags:\n"); fs.PrintDefaults() }
	socket := fs.String("socket", defaultSocket, "vstellard API socket `path`")
	c := &cli{stdout: stdout}
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "request timeout")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if c.version {
		return c.printVersion()
	}
	c.client = api.NewClient(*socket)
	defer c.client.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "vstellarctl: no command\n\n%s", usage)
		return exitUsage
	}
	err := c.dispatch(ctx, fs.Args())
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errVersion):
		return c.printVersion()
	}
	// One line, whatever the cause's message holds (docs/operations.md).
	msg := strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), errUsage.Error()+": ")), " ")
	if code := exitCode(err); code == exitUsage {
		fmt.Fprintf(stderr, "vstellarctl: %s (vstellarctl -h for usage)\n", msg)
		return code
	}
	fmt.Fprintf(stderr, "vstellarctl: %s\n", msg)
	return exitCode(err)
}

func (c *cli) printVersion() int {
	fmt.Fprintf(c.stdout, "vstellarctl %s (%s)\n", version, runtime.Version())
	return exitOK
}

// exitCode maps an error to the exit status scripts see.
func exitCode(err error) int {
	var apiErr *api.APIError
	switch {
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.As(err, &apiErr):
		switch apiErr.Status {
		case http.StatusNotFound:
			return exitNotFound
		case http.StatusConflict:
			return exitConflict
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return exitInvalid
		case http.StatusServiceUnavailable:
			return exitShutdown
		}
		return exitFailed
	case errors.Is(err, api.ErrUnreachable):
		return exitUnreachable
	}
	return exitFailed
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "health":
		if pos, err := c.parseArgs(flag.NewFlagSet("health", flag.ContinueOnError), rest); err != nil {
			return err
		} else if len(pos) != 0 {
			return fmt.Errorf("%w: health takes no arguments but --json", errUsage)
		}
		return c.health(ctx)
	case "devices", "device", "dev":
		return c.devices(ctx, rest)
	case "host":
		return c.host(ctx, rest)
	case "attach":
		return c.attach(ctx, rest)
	case "detach":
		return c.detach(ctx, rest)
	case "qemu-args":
		return c.qemuArgs(ctx, rest)
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}

func (c *cli) health(ctx context.Context) error {
	h, err := c.client.Health(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(h)
	}
	fmt.Fprintf(c.stdout, "status: %s\ndevices: %d\n", h.Status, h.Devices)
	return nil
}
