package main

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/internal/sim/twolevel"
)

// translate --json (tiny: 1 and 4 devices, 2000 DMAs a pattern): every
// per-count key and the headline keys of both patterns, the headline
// being the largest count's; ratio, flatness and growth are the quotients
// they claim to be.
func TestTranslateJSON(t *testing.T) {
	out, errOut := runTiny(t, "translate", "--json")
	t.Log(strings.TrimSpace(out))
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	num := translateJSON(t, out)
	for _, sfx := range []string{"", "_uniform"} {
		var keys []string
		for _, k := range []string{"emtt_ns", "emtt_pins_ns", "atc_ns", "ratio", "ratio_pins", "emtt_flatness", "pins_flatness", "atc_growth"} {
			keys = append(keys, k+sfx)
		}
		for _, n := range []string{"1", "4"} {
			for _, k := range []string{"emtt_ns", "emtt_pins_ns", "atc_ns", "ratio"} {
				keys = append(keys, k+sfx+"_"+n)
			}
		}
		for _, k := range keys {
			if v, ok := num[k]; !ok || !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s = %v (present %v), want a positive finite number", k, v, ok)
			}
		}
		for _, k := range []string{"atc_hit_pct" + sfx + "_1", "atc_hit_pct" + sfx + "_4"} {
			if v, ok := num[k]; !ok || v < 0 || v > 100 {
				t.Errorf("%s = %v (present %v), want a percentage", k, v, ok)
			}
		}
		k := func(name, n string) float64 { return num[name+sfx+n] }
		if k("emtt_ns", "") != k("emtt_ns", "_4") || k("emtt_pins_ns", "") != k("emtt_pins_ns", "_4") || k("atc_ns", "") != k("atc_ns", "_4") {
			t.Errorf("headline%s %v/%v/%v is not the 4-device %v/%v/%v", sfx, k("emtt_ns", ""), k("emtt_pins_ns", ""), k("atc_ns", ""),
				k("emtt_ns", "_4"), k("emtt_pins_ns", "_4"), k("atc_ns", "_4"))
		}
		for _, c := range []struct {
			key  string
			want float64
		}{
			{"ratio" + sfx, k("atc_ns", "_4") / k("emtt_ns", "_4")},
			{"ratio" + sfx + "_1", k("atc_ns", "_1") / k("emtt_ns", "_1")},
			{"emtt_flatness" + sfx, k("emtt_ns", "_4") / k("emtt_ns", "_1")},
			{"ratio_pins" + sfx, k("atc_ns", "_4") / k("emtt_pins_ns", "_4")},
			{"pins_flatness" + sfx, k("emtt_pins_ns", "_4") / k("emtt_pins_ns", "_1")},
			{"atc_growth" + sfx, k("atc_ns", "_4") / k("atc_ns", "_1")},
		} {
			if math.Abs(num[c.key]-c.want) > 1e-9*c.want {
				t.Errorf("%s = %v, want %v", c.key, num[c.key], c.want)
			}
		}
	}
	// The mechanism the hot set is there to show (hit rates are a
	// function of the seeded sequence and the LRU, not of timing): one
	// device's hot set is the ATC's reach, so most of its pages hit; four
	// devices' are four times it and evict each other; without reuse
	// (256 MiB per device) almost nothing hits.
	if h1, h4, u1 := num["atc_hit_pct_1"], num["atc_hit_pct_4"], num["atc_hit_pct_uniform_1"]; h1 < 50 || h4 > h1/2 || u1 > 5 {
		t.Errorf("ATC hits: hot set %.1f%% at 1 device (want >= 50), %.1f%% at 4 (want <= half); uniform %.1f%% at 1 (want <= 5)", h1, h4, u1)
	}
}

// --devices picks the counts (sorted, duplicates dropped), for both
// patterns.
func TestTranslateDevicesFlag(t *testing.T) {
	out, _ := runTiny(t, "translate", "--json", "--devices", "3,2,3")
	num := translateJSON(t, out)
	var keys []string
	perCount := regexp.MustCompile(`^emtt_ns_.*[0-9]$`)
	for k := range num {
		if perCount.MatchString(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if want := []string{"emtt_ns_2", "emtt_ns_3", "emtt_ns_uniform_2", "emtt_ns_uniform_3"}; !slices.Equal(keys, want) {
		t.Errorf("per-count keys %v, want %v", keys, want)
	}
	if num["emtt_ns"] != num["emtt_ns_3"] || num["emtt_ns_uniform"] != num["emtt_ns_uniform_3"] {
		t.Errorf("headline is not the largest count's")
	}
}

// translate without --json: a table per pattern with a row per count,
// the summary and the notes.
func TestTranslateTable(t *testing.T) {
	out, errOut := runTiny(t, "translate")
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	for _, want := range []string{
		"DMA address translation, hot set: 2000 DMAs", "90% inside 4 x 64 KiB buffers",
		"DMA address translation, uniform: no reuse, 2000 DMAs",
		"ATC hit %", "emtt_flatness", "atc_hit_pct_4", "atc_hit_pct_uniform_4", "ratio_uniform",
		"hot set: each device reuses 4 page-aligned 64 KiB buffers",
		"PCIe round trip", "goal ratio >= 5 (2-level / eMTT", "goal emtt_flatness <= 1.5",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, n := range []string{"1", "4"} {
		if rows := regexp.MustCompile(`(?m)^ *`+n+`( +[0-9.]+){7} *$`).FindAllString(out, -1); len(rows) != 2 {
			t.Errorf("%d rows for %s devices, want one per pattern:\n%s", len(rows), n, out)
		}
	}
}

// The sequences: seeded (the same twice), every DMA inside its MR, the
// hot pattern's share of DMAs inside the device's hot buffers, every
// device and buffer used, and a device's buffers in the same places
// whatever the device count.
func TestTranslateSequence(t *testing.T) {
	const n = 20000
	for _, pat := range trPatterns {
		for _, devices := range []int{1, 16} {
			t.Run(fmt.Sprintf("hotpct=%d/devices=%d", pat.hotPct, devices), func(t *testing.T) {
				seq := translateSequence(devices, n, pat.hotPct)
				if again := translateSequence(devices, n, pat.hotPct); !slices.Equal(seq, again) {
					t.Fatal("two draws differ")
				}
				inHot := 0
				perDev := make([]int, devices)
				perBuf := make([]int, trHotBufs)
				for i, a := range seq {
					start, size := trIOVA(int(a.mr)), uint64(a.n)
					if int(a.dev) >= devices || a.mr >= trMRs || !slices.Contains(trSizes, size) ||
						a.iova < start || a.iova+size > start+trMRSize || (a.iova-start)%64 != 0 {
						t.Fatalf("DMA %d %+v is not a cache-line-aligned DMA inside an MR", i, a)
					}
					perDev[a.dev]++
					if off := trHotOffset(uint32(a.dev), int(a.mr)); a.iova >= start+off && a.iova+size <= start+off+trHotSize {
						inHot++
						perBuf[a.mr]++
					}
				}
				// Binomial: 3 sigma of 20000 draws is under 1%.
				if got := 100 * float64(inHot) / n; math.Abs(got-float64(pat.hotPct)) > 1.5 {
					t.Errorf("%.1f%% of DMAs inside a hot buffer, want %d%%", got, pat.hotPct)
				}
				for d, c := range perDev {
					if want := n / devices; c < want*3/4 || c > want*5/4 {
						t.Errorf("device %d has %d DMAs, want about %d", d, c, want)
					}
				}
				for j, c := range perBuf {
					if pat.hotPct > 0 && c < inHot/trHotBufs*3/4 {
						t.Errorf("hot buffer %d has %d of %d hot DMAs", j, c, inHot)
					}
				}
			})
		}
	}
	// Hot buffers are page aligned, inside their MR, and not the same
	// place for every device.
	offs := map[uint64]bool{}
	for dev := range uint32(64) {
		for j := range trHotBufs {
			off := trHotOffset(dev, j)
			if off%twolevel.PageSize != 0 || off+trHotSize > trMRSize {
				t.Fatalf("device %d hot buffer %d at %#x", dev, j, off)
			}
			offs[off] = true
		}
	}
	if len(offs) < 64*trHotBufs/2 {
		t.Errorf("%d distinct hot buffer offsets for %d buffers", len(offs), 64*trHotBufs)
	}
}

// The timed loops allocate nothing once warm: neither the eMTT (without
// and with pin references) nor the model.
func TestTranslateNoAllocs(t *testing.T) {
	guest, unmap, err := translateGuest()
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	b, _, err := buildTranslateBench(guest, 3)
	defer b.close()
	if err != nil {
		t.Fatal(err)
	}
	for _, pat := range trPatterns {
		seq := translateSequence(3, 500, pat.hotPct)
		for _, c := range []struct {
			name string
			f    func() error
		}{
			{"eMTT", func() error { return b.emtt(seq, false) }},
			{"eMTT with pins", func() error { return b.emtt(seq, true) }},
			{"model", func() error { return b.model(seq) }},
		} {
			if err := c.f(); err != nil { // warm
				t.Fatalf("%s: %v", c.name, err)
			}
			var err error
			if allocs := testing.AllocsPerRun(3, func() { err = c.f() }); allocs != 0 || err != nil {
				t.Errorf("hot %d%%, %s: %v allocations a pass of %d DMAs (err %v), want 0", pat.hotPct, c.name, allocs, len(seq), err)
			}
		}
	}
}

// Bad device counts are refused before anything is built.
func TestTranslateBadDevices(t *testing.T) {
	for _, bad := range []string{"0", "1,x", "", "1,,2", "99999"} {
		if _, err := parseDeviceCounts(bad); err == nil {
			t.Errorf("parseDeviceCounts(%q) accepted", bad)
		}
	}
	got, err := parseDeviceCounts(" 16,1,1024,16")
	if err != nil || !slices.Equal(got, []int{1, 16, 1024}) {
		t.Errorf("parseDeviceCounts = %v, %v", got, err)
	}
}

func translateJSON(t *testing.T, out string) map[string]float64 {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("stdout is not one line: %q", out)
	}
	var num map[string]float64
	if err := json.Unmarshal([]byte(out), &num); err != nil {
		t.Fatalf("stdout is not a JSON object of numbers: %v\n%s", err, out)
	}
	return num
}
