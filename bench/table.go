package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// unit says what a scenario measures and which way is better.
type unit int

const (
	opsPerSec unit = iota // higher is better
	duration              // lower is better (latency, time per batch)
)

// Contender names. Rows appear in this order within a scenario.
const (
	nameLeasebus  = "leasebus"
	nameRaw       = "raw go-redis"
	nameWatermill = "watermill-redisstream"
	nameRedislock = "bsm/redislock"
	nameRedsync   = "redsync/v4"
)

// isPeer reports whether name is a third-party library (not leasebus, not
// the hand-written baseline).
func isPeer(name string) bool {
	return name == nameWatermill || name == nameRedislock || name == nameRedsync
}

// scenario is one row group of the table.
type scenario struct {
	Name string
	Unit unit
	Note string // what one sample is, printed under the table
}

// result collects the samples of one scenario and contender over the rounds.
type result struct {
	Scenario  scenario
	Contender string
	Samples   []float64 // ops/s, or nanoseconds for duration
}

func (r *result) median() float64 { return quantile(r.Samples, 0.5) }

func (r *result) minmax() (lo, hi float64) {
	if len(r.Samples) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(r.Samples), slices.Max(r.Samples)
}

// quantile returns the q-quantile of xs (nearest rank on a sorted copy; the
// median of an even count is the mean of the two middle values).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if q == 0.5 && len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// speedup returns how many times better got is than ref, oriented so that
// above 1 always means got is better: got/ref for throughput, ref/got for
// durations. NaN when either is missing or zero.
func speedup(u unit, got, ref float64) float64 {
	if math.IsNaN(got) || math.IsNaN(ref) || got <= 0 || ref <= 0 {
		return math.NaN()
	}
	if u == opsPerSec {
		return got / ref
	}
	return ref / got
}

// better reports whether a beats b in unit u.
func better(u unit, a, b float64) bool {
	if u == opsPerSec {
		return a > b
	}
	return a < b
}

// row is one rendered line of the table.
type row struct {
	Scenario, Contender string
	Median, Min, Max    string
	VsPeer, VsRaw       string
	BestPeer            string
}

// rows computes the rendered rows of results, grouped by scenario in order of
// first appearance.
func rows(results []*result) []row {
	var order []string
	by := map[string][]*result{}
	for _, r := range results {
		if _, ok := by[r.Scenario.Name]; !ok {
			order = append(order, r.Scenario.Name)
		}
		by[r.Scenario.Name] = append(by[r.Scenario.Name], r)
	}
	var out []row
	for _, name := range order {
		group := by[name]
		u := group[0].Scenario.Unit
		best, bestName, raw := math.NaN(), "", math.NaN()
		for _, r := range group {
			m := r.median()
			if math.IsNaN(m) {
				continue
			}
			if r.Contender == nameRaw {
				raw = m
			}
			if isPeer(r.Contender) && (math.IsNaN(best) || better(u, m, best)) {
				best, bestName = m, r.Contender
			}
		}
		for _, r := range group {
			lo, hi := r.minmax()
			m := r.median()
			rw := row{
				Scenario: name, Contender: r.Contender,
				Median: format(u, m), Min: format(u, lo), Max: format(u, hi),
				VsPeer: "—", VsRaw: "—", BestPeer: bestName,
			}
			if bestName != "" && r.Contender != bestName {
				rw.VsPeer = ratio(speedup(u, m, best))
			}
			if r.Contender != nameRaw {
				rw.VsRaw = ratio(speedup(u, m, raw))
			}
			out = append(out, rw)
		}
	}
	return out
}

func ratio(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", x)
}

// format renders a value: ops/s with thousands separators, durations in
// µs or ms.
func format(u unit, v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if u == opsPerSec {
		return groupDigits(int64(math.Round(v))) + "/s"
	}
	d := time.Duration(v)
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// renderTable writes the markdown table of results to w, followed by the
// notes of the scenarios.
func renderTable(w io.Writer, results []*result) {
	fmt.Fprintln(w, "| scenario | contender | median | min | max | vs best peer | vs raw go-redis |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|")
	for _, r := range rows(results) {
		peer := r.VsPeer
		if peer != "—" && r.BestPeer != "" {
			peer += " (" + r.BestPeer + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n",
			r.Scenario, r.Contender, r.Median, r.Min, r.Max, peer, r.VsRaw)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios are speedups: above 1× the contender is better (more ops/s, or less time) than the reference, the best third-party peer of the scenario or the hand-written go-redis baseline.")
	seen := map[string]bool{}
	for _, r := range results {
		if r.Scenario.Note != "" && !seen[r.Scenario.Name] {
			seen[r.Scenario.Name] = true
			fmt.Fprintf(w, "- **%s**: %s\n", r.Scenario.Name, r.Scenario.Note)
		}
	}
}
