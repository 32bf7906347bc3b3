package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"odd median", []float64{5, 1, 3}, 0.5, 3},
		{"even median", []float64{4, 1, 3, 2}, 0.5, 2.5},
		{"p99 of 100", seq(100), 0.99, 99},
		{"p50 of 100 is mean of middle", seq(100), 0.5, 50.5},
		{"single", []float64{7}, 0.99, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantile(tc.xs, tc.q); got != tc.want {
				t.Errorf("quantile(%v, %v) = %v, want %v", tc.xs, tc.q, got, tc.want)
			}
		})
	}
	if got := quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("quantile(nil) = %v, want NaN", got)
	}
}

func seq(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(i + 1)
	}
	return s
}

func TestRowsRatios(t *testing.T) {
	tput := scenario{Name: "tput", Unit: opsPerSec}
	lat := scenario{Name: "lat", Unit: duration}
	results := []*result{
		{Scenario: tput, Contender: nameLeasebus, Samples: []float64{900, 1000, 1100}},
		{Scenario: tput, Contender: nameRedislock, Samples: []float64{200}},
		{Scenario: tput, Contender: nameRedsync, Samples: []float64{250, 250}},
		{Scenario: tput, Contender: nameRaw, Samples: []float64{500}},
		{Scenario: lat, Contender: nameLeasebus, Samples: []float64{float64(100 * time.Microsecond)}},
		{Scenario: lat, Contender: nameWatermill, Samples: []float64{float64(400 * time.Microsecond)}},
		{Scenario: lat, Contender: nameRaw, Samples: []float64{float64(50 * time.Microsecond)}},
	}
	got := map[string]row{}
	for _, r := range rows(results) {
		got[r.Scenario+"/"+r.Contender] = r
	}
	for _, tc := range []struct {
		key                                 string
		median, min, max, vsPeer, vsRaw, bp string
	}{
		// Best peer by throughput is redsync (250 > 200).
		{"tput/" + nameLeasebus, "1,000/s", "900/s", "1,100/s", "4.00×", "2.00×", nameRedsync},
		{"tput/" + nameRedislock, "200/s", "200/s", "200/s", "0.80×", "0.40×", nameRedsync},
		{"tput/" + nameRedsync, "250/s", "250/s", "250/s", "—", "0.50×", nameRedsync},
		{"tput/" + nameRaw, "500/s", "500/s", "500/s", "2.00×", "—", nameRedsync},
		// Durations: less is better, so 100µs vs 400µs is a 4× speedup.
		{"lat/" + nameLeasebus, "100 µs", "100 µs", "100 µs", "4.00×", "0.50×", nameWatermill},
		{"lat/" + nameRaw, "50 µs", "50 µs", "50 µs", "8.00×", "—", nameWatermill},
	} {
		r, ok := got[tc.key]
		if !ok {
			t.Fatalf("no row %s", tc.key)
		}
		if r.Median != tc.median || r.Min != tc.min || r.Max != tc.max {
			t.Errorf("%s: median/min/max = %s/%s/%s, want %s/%s/%s", tc.key, r.Median, r.Min, r.Max, tc.median, tc.min, tc.max)
		}
		if r.VsPeer != tc.vsPeer || r.VsRaw != tc.vsRaw || r.BestPeer != tc.bp {
			t.Errorf("%s: vs peer %s, vs raw %s, best peer %s; want %s, %s, %s", tc.key, r.VsPeer, r.VsRaw, r.BestPeer, tc.vsPeer, tc.vsRaw, tc.bp)
		}
	}
}

func TestRowsMissingContender(t *testing.T) {
	s := scenario{Name: "s", Unit: opsPerSec}
	rs := rows([]*result{
		{Scenario: s, Contender: nameLeasebus, Samples: []float64{10}},
		{Scenario: s, Contender: nameWatermill}, // failed: no samples
	})
	for _, r := range rs {
		if r.VsPeer != "—" || r.VsRaw != "—" {
			t.Errorf("%s: vs peer %s, vs raw %s; want — and — with no reference", r.Contender, r.VsPeer, r.VsRaw)
		}
	}
}

func TestRenderTable(t *testing.T) {
	var b strings.Builder
	renderTable(&b, []*result{{Scenario: scenario{Name: "publish", Unit: opsPerSec, Note: "n"}, Contender: nameRaw, Samples: []float64{1234567}}})
	if !strings.Contains(b.String(), "| publish | raw go-redis | 1,234,567/s |") {
		t.Errorf("table = %q, want a row with 1,234,567/s", b.String())
	}
}

func TestPayloadSeq(t *testing.T) {
	p := newPayload(256, 0)
	if len(p) != 256 || p[0] != '"' || p[255] != '"' {
		t.Fatalf("payload %q is not a 256-byte JSON string", p)
	}
	for _, n := range []uint64{1, 42, 1 << 40} {
		writeSeq(p, n)
		if got, ok := readSeq(p); !ok || got != n {
			t.Errorf("readSeq after writeSeq(%d) = %d, %v", n, got, ok)
		}
	}
}
