package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// workerMark returns the timeline character of a worker: its number.
func workerMark(worker string) byte {
	n := strings.TrimPrefix(worker, "w")
	if len(n) == 1 {
		return n[0]
	}
	var i int
	fmt.Sscan(n, &i)
	return byte('a' + (i-10)%26)
}

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
	fmt.Fprintf(w, "Timeline (%s, one column = %s; digits = the worker running the thread):\n", roundDur(span), roundDur(span/time.Duration(width)))
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
		row := []byte(strings.Repeat(".", width))
		for _, run := range a.Runs[th] {
			m := workerMark(run.Worker)
			if run.Rogue {
				m = 'R'
			}
			for c := col(run.Start); c <= col(run.End); c++ {
				if row[c] != '.' && row[c] != m {
					row[c] = '!'
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
				if row[c] == '.' {
					row[c] = 'x'
				}
			}
			row[col(t.Kill.At)] = 'X'
		}
		fmt.Fprintf(w, "  %-*s |%s|\n", label, th, row)
	}
	fmt.Fprintln(w, "  legend: 1-9 worker w1-w9 running the thread · . no run · X the owner was SIGKILLed · x its lease running out until the takeover · ! two runs at once · R run without the lease")
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
