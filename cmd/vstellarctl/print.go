package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"
)

// table prints aligned columns.
type table struct{ tw *tabwriter.Writer }

func (c *cli) table(head ...string) *table {
	t := &table{tw: tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)}
	fmt.Fprintln(t.tw, strings.Join(head, "\t"))
	return t
}

func (t *table) row(cells ...any) {
	s := make([]string, len(cells))
	for i, v := range cells {
		s[i] = fmt.Sprint(v)
	}
	fmt.Fprintln(t.tw, strings.Join(s, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// keyValues prints "key: value" lines with aligned values.
type keyValues struct{ tw *tabwriter.Writer }

func (c *cli) keyValues() *keyValues {
	return &keyValues{tw: tabwriter.NewWriter(c.stdout, 0, 4, 1, ' ', 0)}
}

func (k *keyValues) add(key string, v any) { fmt.Fprintf(k.tw, "%s:\t%v\n", key, v) }

func (k *keyValues) flush() error { return k.tw.Flush() }

// printJSON prints v as indented JSON.
func (c *cli) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// oneLine keeps a table row on one line whatever an error message holds.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func localTime(t time.Time) string { return t.Local().Format(time.DateTime) }

// bytesIEC writes a byte count with a binary unit.
func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// gidIB writes a GID as the rdma tools do (show_gids, ibv_devinfo -v):
// eight groups of four hex digits, so its low half reads as the node GUID
// does. Anything else is returned as it is.
func gidIB(gid string) string {
	a, err := netip.ParseAddr(gid)
	if err != nil || !a.Is6() {
		return gid
	}
	return a.StringExpanded()
}

// pageSizes lists the page sizes of a capability mask ("4.0 KiB, 2.0 MiB").
func pageSizes(mask uint64) string {
	var s []string
	for b := range 64 {
		if mask&(1<<b) != 0 {
			s = append(s, bytesIEC(1<<b))
		}
	}
	if len(s) > 6 {
		return fmt.Sprintf("%#x", mask)
	}
	return strings.Join(s, ", ")
}
