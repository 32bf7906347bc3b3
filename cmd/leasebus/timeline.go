package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// workerMark returns the timeline character of a worker: its number for
// w1-w9, then a letter from a (w10) to q (w26, the most --workers allows).
func workerMark(worker string) byte {
	n := strings.TrimPrefix(worker, "w")
	if len(n) == 1 {
		return n[0]
	}
	var i int
	fmt.Sscan(n, &i)
	return byte('a' + (i-10)%26)
}

// workerLegend explains the worker marks of a timeline whose highest worker
// is w<n>: "1-3 worker w1-w3", "1-9 worker w1-w9, a-c worker w10-w12".
func workerLegend(n int) string {
	switch {
	case n <= 1:
		return "1 worker w1"
	case n <= 9:
		return fmt.Sprintf("1-%d worker w1-w%d", n, n)
	case n == 10:
		return "1-9 worker w1-w9, a worker w10"
	}
	return fmt.Sprintf("1-9 worker w1-w9, a-%c worker w10-w%d", workerMark(fmt.Sprintf("w%d", n)), n)
}

// Marks of the timeline besides the workers'.
const (
	markIdle    = '.' // no run, lease not held by a run's tenure
	markLinger  = '-' // a tenure holds the lease between runs (linger before a hand-off or release)
	markKill    = 'X' // the owner was SIGKILLed
	markExpiry  = 'x' // the killed owner's lease running out until the takeover
	markOverlap = '!' // two runs at once
	markRogue   = 'R' // a run without the lease (fault injection)
)

// drawTimeline draws one row per thread: which worker ran it when, the kill
// and the takeover, then the runs of each thread in order.
func drawTimeline(w io.Writer, a *analysis, width int) {
	span := a.Finish.Sub(a.Begin)
	if span <= 0 {
		span = time.Millisecond
	}
	col := func(t time.Time) int {
		c := int(float64(t.Sub(a.Begin)) / float64(span) * float64(width-1))
		return max(0, min(width-1, c))
	}
	// The legend covers every worker of the demo (each reported ready) and
	// every worker drawn.
	maxWorker := 1
	names := a.Workers
	for _, runs := range a.Runs {
		for _, run := range runs {
			names = append(names, run.Worker)
		}
	}
	for _, name := range names {
		var i int
		if _, err := fmt.Sscanf(name, "w%d", &i); err == nil {
			maxWorker = max(maxWorker, i)
		}
	}
	marks := "digits"
	if maxWorker > 9 {
		marks = "digits and letters"
	}
	fmt.Fprintf(w, "Timeline (%s, one column = %s; %s = the worker running the thread):\n", roundDur(span), roundDur(span/time.Duration(width)), marks)
	label := 0
	for _, th := range a.Threads {
		label = max(label, len(th))
	}
	// Axis with a few second marks.
	axis := []byte(strings.Repeat(" ", width+12))
	step := time.Second
	for span/step > 8 {
		step *= 2
	}
	for t := time.Duration(0); t <= span; t += step {
		c := col(a.Begin.Add(t))
		mark := fmt.Sprintf("%gs", t.Seconds())
		if c+len(mark) <= len(axis) {
			copy(axis[c:], mark)
		}
	}
	fmt.Fprintf(w, "  %-*s  %s\n", label, "", strings.TrimRight(string(axis), " "))
	for _, th := range a.Threads {
		row := []byte(strings.Repeat(string(markIdle), width))
		// A tenure holds the lease after its run ended until it handed the
		// lease to the next run or released it (the linger): drawn apart
		// from "no run", so a gap-free hand-off does not look like a gap.
		linger := func(from, to time.Time) {
			for c := col(from) + 1; c < col(to); c++ {
				row[c] = markLinger
			}
		}
		for _, h := range a.Handoffs {
			if h.Thread != th || h.NextRun == nil {
				continue
			}
			for _, run := range a.Runs[th] {
				if run.ID == h.PrevRun && run.Outcome != runKilled {
					linger(run.End, h.NextRun.Start)
				}
			}
		}
		for _, run := range a.Runs[th] {
			if at, ok := a.Released[run.ID]; ok && run.Outcome != runKilled {
				linger(run.End, at)
			}
		}
		for _, run := range a.Runs[th] {
			m := workerMark(run.Worker)
			if run.Rogue {
				m = markRogue
			}
			for c := col(run.Start); c <= col(run.End); c++ {
				if row[c] != markIdle && row[c] != markLinger && row[c] != m {
					row[c] = markOverlap
				} else {
					row[c] = m
				}
			}
		}
		for _, t := range a.Takeovers {
			if t.Thread != th {
				continue
			}
			end := a.Finish
			if t.NewRun != nil {
				end = t.NewRun.Start
			}
			for c := col(t.Kill.At) + 1; c < col(end); c++ {
				if row[c] == markIdle || row[c] == markLinger {
					row[c] = markExpiry
				}
			}
			row[col(t.Kill.At)] = markKill
		}
		fmt.Fprintf(w, "  %-*s |%s|\n", label, th, row)
	}
	fmt.Fprintf(w, "  legend: %s running the thread · %c lease held between runs (linger before a hand-off or release) · %c no run\n"+
		"          %c the owner was SIGKILLed · %c its lease running out until the takeover · %c two runs at once · %c run without the lease\n",
		workerLegend(maxWorker), markLinger, markIdle, markKill, markExpiry, markOverlap, markRogue)
	for _, th := range a.Threads {
		fmt.Fprintf(w, "\n  %s\n", th)
		for _, run := range a.Runs[th] {
			var sigs []string
			for _, id := range run.Signals {
				s := id[strings.LastIndex(id, "/")+1:]
				if run.Redelivered[id] {
					s += "(redelivered)"
				}
				if !run.Did[id] && !run.Rogue {
					s += "(not done)"
				}
				sigs = append(sigs, s)
			}
			if run.Unstarted {
				sigs = []string{"(killed before it started)"}
			}
			via := run.Via
			if run.Rogue {
				via = "NO LEASE"
			}
			if via == "" {
				via = "-"
			}
			end := fmt.Sprintf("until %5.2fs", run.End.Sub(a.Begin).Seconds())
			switch run.Outcome {
			case runKilled:
				end = fmt.Sprintf("KILLED at %.2fs", run.End.Sub(a.Begin).Seconds())
			case runFailed:
				end += " (" + run.Err + ")"
			case runOpen:
				end = "never finished"
			}
			fmt.Fprintf(w, "    %5.2fs  %-3s token %-3d %-9s %-26s %s\n",
				run.Start.Sub(a.Begin).Seconds(), run.Worker, run.Token, via, strings.Join(sigs, " "), end)
		}
		for _, t := range a.Takeovers {
			if t.Thread == th && t.TakenOver {
				fmt.Fprintf(w, "    takeover: %s killed at %.2fs, %s ran %s again %s later (lease TTL %s)\n",
					t.From, t.Kill.At.Sub(a.Begin).Seconds(), t.To, th, roundDur(t.After), a.LeaseTTL)
			}
		}
	}
}
