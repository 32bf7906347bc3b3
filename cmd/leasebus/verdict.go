package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// demoRun is one agent run as the records tell it.
type demoRun struct {
	Worker, Thread, ID string
	Token              uint64
	StartSeq, EndSeq   int
	Start, End         time.Time
	Outcome            string // runDone, runFailed, runKilled, runOpen
	Err                string
	Signals            []string
	Redelivered        map[string]bool
	Rogue              bool   // fault injection: ran without the lease
	Via                string // how its tenure began: viaAcquire, viaHandoff, viaTakeover, or "" for a follow-up run of the same tenure
}

// Outcomes of a demoRun.
const (
	runDone   = "done"
	runFailed = "failed"
	runKilled = "killed"
	runOpen   = "unfinished"
)

// How a run's tenure began.
const (
	viaAcquire  = "acquired"
	viaHandoff  = "hand-off"
	viaTakeover = "takeover"
)

type sentSignal struct {
	Thread, Worker, Action string
	Seq                    int
}

type handoff struct {
	Thread, Worker     string
	PrevRun, Run       string
	PrevToken, Token   uint64
	Seq                int
	At                 time.Time
	NextRun            *demoRun // the run that started next on the thread
	PrevWorker, Reason string
}

type kill struct {
	Worker string
	Seq    int
	At     time.Time
}

type takeover struct {
	Thread     string
	From, To   string // workers
	Token      uint64
	After      time.Duration
	Kill       kill
	TakenOver  bool
	KilledRun  *demoRun
	NewRun     *demoRun
	PendingRun bool // the killed worker had a run in progress on the thread
}

// analysis is what the demo records say happened.
type analysis struct {
	Begin, Finish time.Time
	Records       int
	Threads       []string
	Runs          map[string][]*demoRun // thread -> runs in start order
	Sent          map[string]sentSignal // signal id -> who sent it
	SendFailures  []string
	Handoffs      []*handoff
	Kills         []kill
	Takeovers     []*takeover
	LeaseTTL      time.Duration
	Recovery      time.Duration
}

// analyze builds the analysis from the demo records (in stream order).
func analyze(recs []record, threads []string, ttl, recovery time.Duration) *analysis {
	a := &analysis{
		Records: len(recs), Threads: threads, Runs: map[string][]*demoRun{}, Sent: map[string]sentSignal{},
		LeaseTTL: ttl, Recovery: recovery,
	}
	if len(recs) > 0 {
		a.Begin, a.Finish = recs[0].At, recs[len(recs)-1].At
	}
	byID := map[string]*demoRun{}
	tenure := map[string]string{} // run id -> how its tenure began (from the observer)
	lastSeq := 0
	for _, r := range recs {
		lastSeq = r.Seq
		switch r.Kind {
		case recSent:
			a.Sent[r.Get("sig")] = sentSignal{Thread: r.Get("th"), Worker: r.Worker, Action: r.Get("act"), Seq: r.Seq}
		case recSendFail:
			a.SendFailures = append(a.SendFailures, fmt.Sprintf("%s: send %s to %s: %s", r.Worker, r.Get("sig"), r.Get("th"), r.Get("err")))
		case recStart, recRogue:
			run := &demoRun{
				Worker: r.Worker, Thread: r.Get("th"), ID: r.Get("run"), Token: r.Token("tok"),
				StartSeq: r.Seq, Start: r.At, EndSeq: -1, Outcome: runOpen,
				Signals: r.List("sigs"), Redelivered: map[string]bool{}, Rogue: r.Kind == recRogue,
			}
			for _, id := range r.List("redel") {
				run.Redelivered[id] = true
			}
			run.Via = tenure[run.ID]
			a.Runs[run.Thread] = append(a.Runs[run.Thread], run)
			byID[r.Worker+"/"+run.ID] = run
		case recSignal:
			if run := byID[r.Worker+"/"+r.Get("run")]; run != nil {
				run.Signals = append(run.Signals, r.Get("sig"))
				if r.Get("redel") == "1" {
					run.Redelivered[r.Get("sig")] = true
				}
			}
		case recEnd:
			if run := byID[r.Worker+"/"+r.Get("run")]; run != nil {
				run.EndSeq, run.End = r.Seq, r.At
				run.Outcome, run.Err = runDone, r.Get("err")
				if run.Err != "" {
					run.Outcome = runFailed
				}
			}
		case recKilled:
			k := kill{Worker: r.Worker, Seq: r.Seq, At: r.At}
			a.Kills = append(a.Kills, k)
			for _, runs := range a.Runs {
				for _, run := range runs {
					if run.Worker == k.Worker && run.Outcome == runOpen {
						run.Outcome, run.EndSeq, run.End = runKilled, k.Seq, k.At
					}
				}
			}
		case recObserved:
			switch r.Get("ev") {
			case "tenure-started":
				tenure[r.Get("run")] = viaAcquire
			case "recovered":
				tenure[r.Get("run")] = viaTakeover
			case "handed-off":
				tenure[r.Get("run")] = viaHandoff
				a.Handoffs = append(a.Handoffs, &handoff{
					Thread: r.Get("th"), Worker: r.Worker, PrevRun: r.Get("prun"), Run: r.Get("run"),
					PrevToken: r.Token("ptok"), Token: r.Token("tok"), Seq: r.Seq, At: r.At,
				})
			}
		}
	}
	for _, runs := range a.Runs {
		for _, run := range runs {
			if run.Outcome == runOpen {
				run.EndSeq, run.End = lastSeq+1, a.Finish
			}
			if run.Via == "" {
				run.Via = tenure[run.ID]
			}
		}
	}
	for _, t := range sortedKeys(a.Runs) {
		if !slices.Contains(a.Threads, t) {
			a.Threads = append(a.Threads, t)
		}
	}
	a.linkHandoffs()
	a.findTakeovers()
	return a
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// linkHandoffs finds, for each hand-off, the run that started next on its
// thread after the run that handed over.
func (a *analysis) linkHandoffs() {
	for _, h := range a.Handoffs {
		runs := a.Runs[h.Thread]
		for i, run := range runs {
			if run.ID == h.PrevRun {
				h.PrevWorker = run.Worker
				for _, next := range runs[i+1:] {
					if !next.Rogue {
						h.NextRun = next
						break
					}
				}
				break
			}
		}
	}
}

// findTakeovers finds, for each kill, the threads the killed worker was
// running and who ran them next.
func (a *analysis) findTakeovers() {
	for _, k := range a.Kills {
		for _, th := range a.Threads {
			var killed *demoRun
			for _, run := range a.Runs[th] {
				if run.Worker == k.Worker && run.Outcome == runKilled {
					killed = run
				}
			}
			if killed == nil {
				continue
			}
			t := &takeover{Thread: th, From: k.Worker, Kill: k, KilledRun: killed}
			for _, run := range a.Runs[th] {
				if run.StartSeq > k.Seq && !run.Rogue {
					t.TakenOver, t.NewRun, t.To, t.Token = true, run, run.Worker, run.Token
					t.After = run.Start.Sub(k.At)
					break
				}
			}
			a.Takeovers = append(a.Takeovers, t)
		}
	}
}

// check is one guarantee the verdict checks.
type check struct {
	Name     string
	OK       bool
	Summary  string
	Failures []string
}

// verdict checks the guarantees against the analysis.
func (a *analysis) verdict() []check {
	return []check{a.checkOneOwner(), a.checkEverySignal(), a.checkHandoffs(), a.checkTakeover()}
}

func (a *analysis) checkOneOwner() check {
	c := check{Name: "one owner at a time"}
	n := 0
	for _, th := range a.Threads {
		runs := a.Runs[th]
		n += len(runs)
		for i := 1; i < len(runs); i++ {
			prev, cur := runs[i-1], runs[i]
			if cur.StartSeq < prev.EndSeq {
				c.Failures = append(c.Failures, fmt.Sprintf("%s: run %s (%s, token %d) started while run %s (%s, token %d) was still running",
					th, short(cur.ID), cur.Worker, cur.Token, short(prev.ID), prev.Worker, prev.Token))
			}
			if cur.Token <= prev.Token {
				c.Failures = append(c.Failures, fmt.Sprintf("%s: run %s (%s) has fencing token %d, not greater than %d of the run before it",
					th, short(cur.ID), cur.Worker, cur.Token, prev.Token))
			}
		}
	}
	c.OK = len(c.Failures) == 0
	c.Summary = fmt.Sprintf("%d runs on %d threads; fencing tokens strictly increasing per thread; no two runs of a thread overlapped", n, len(a.Threads))
	if !c.OK {
		c.Summary = fmt.Sprintf("%d runs on %d threads; %d violation(s)", n, len(a.Threads), len(c.Failures))
	}
	return c
}

func (a *analysis) checkEverySignal() check {
	c := check{Name: "every signal ran"}
	got := map[string][]*demoRun{}
	for _, th := range a.Threads {
		for _, run := range a.Runs[th] {
			if run.Rogue {
				continue
			}
			for _, id := range run.Signals {
				got[id] = append(got[id], run)
			}
		}
	}
	killed := map[string]bool{}
	for _, k := range a.Kills {
		killed[k.Worker] = true
	}
	ran, again := 0, 0
	for _, id := range sortedKeys(a.Sent) {
		s := a.Sent[id]
		runs := got[id]
		done := 0
		for i, run := range runs {
			if run.Outcome == runDone || run.Outcome == runFailed {
				done++
				if done > 1 && !killed[runs[i-1].Worker] {
					c.Failures = append(c.Failures, fmt.Sprintf("signal %s of %s ran to the end twice (runs %s and %s)", id, s.Thread, short(runs[i-1].ID), short(run.ID)))
				}
			}
			if run.Thread != s.Thread {
				c.Failures = append(c.Failures, fmt.Sprintf("signal %s sent to %s ran on %s", id, s.Thread, run.Thread))
			}
			if i > 0 {
				if !run.Redelivered[id] {
					c.Failures = append(c.Failures, fmt.Sprintf("signal %s of %s was given again to run %s without the redelivered mark", id, s.Thread, short(run.ID)))
				}
				if run.Token <= runs[i-1].Token {
					c.Failures = append(c.Failures, fmt.Sprintf("signal %s of %s was given again to run %s with token %d, not above %d", id, s.Thread, short(run.ID), run.Token, runs[i-1].Token))
				}
			}
		}
		if done == 0 {
			how := "never ran"
			if len(runs) > 0 {
				how = fmt.Sprintf("never ran to the end (its last run %s was %s)", short(runs[len(runs)-1].ID), runs[len(runs)-1].Outcome)
			}
			c.Failures = append(c.Failures, fmt.Sprintf("signal %s of %s (accepted by %s, %s) %s", id, s.Thread, s.Worker, s.Action, how))
			continue
		}
		ran++
		if len(runs) > 1 {
			again++
		}
	}
	c.Failures = append(c.Failures, a.SendFailures...)
	c.OK = len(c.Failures) == 0 && len(a.Sent) > 0
	c.Summary = fmt.Sprintf("%d/%d accepted signals ran to the end", ran, len(a.Sent))
	if again > 0 {
		c.Summary += fmt.Sprintf("; %d ran again after the kill, marked redelivered, with a higher token", again)
	}
	if len(a.Sent) == 0 {
		c.Failures = append(c.Failures, "no signal was accepted")
	}
	return c
}

func (a *analysis) checkHandoffs() check {
	c := check{Name: "gap-free hand-offs"}
	cross := 0
	for _, h := range a.Handoffs {
		switch {
		case h.NextRun == nil:
			c.Failures = append(c.Failures, fmt.Sprintf("%s: run %s handed the lease to run %s, which never started", h.Thread, short(h.PrevRun), short(h.Run)))
		case h.NextRun.ID != h.Run:
			c.Failures = append(c.Failures, fmt.Sprintf("%s: run %s handed the lease to run %s, but run %s (%s, token %d) ran next",
				h.Thread, short(h.PrevRun), short(h.Run), short(h.NextRun.ID), h.NextRun.Worker, h.NextRun.Token))
		case h.Token <= h.PrevToken:
			c.Failures = append(c.Failures, fmt.Sprintf("%s: hand-off from token %d to token %d does not go up", h.Thread, h.PrevToken, h.Token))
		}
		if h.NextRun != nil && h.NextRun.Worker != h.PrevWorker {
			cross++
		}
	}
	c.OK = len(c.Failures) == 0
	c.Summary = fmt.Sprintf("%d hand-offs, each by TransferLease straight to the next run with a higher token, no other tenure in between", len(a.Handoffs))
	if len(a.Handoffs) == 0 {
		c.Summary = "no run ended with queued signals, so there was nothing to hand off"
	}
	return c
}

func (a *analysis) checkTakeover() check {
	c := check{Name: "takeover after the kill"}
	bound := a.LeaseTTL + 2*a.Recovery + 3*time.Second
	var parts []string
	for _, t := range a.Takeovers {
		if !t.TakenOver {
			if t.KilledRun != nil && len(t.KilledRun.Signals) > 0 {
				c.Failures = append(c.Failures, fmt.Sprintf("%s: nobody took over after %s was killed", t.Thread, t.From))
			}
			continue
		}
		parts = append(parts, fmt.Sprintf("%s taken over by %s %s after %s was killed", t.Thread, t.To, roundDur(t.After), t.From))
		if t.After > bound {
			c.Failures = append(c.Failures, fmt.Sprintf("%s: takeover took %s, more than lease TTL %s + recovery", t.Thread, roundDur(t.After), a.LeaseTTL))
		}
	}
	c.OK = len(c.Failures) == 0
	switch {
	case len(a.Kills) == 0:
		c.Summary = "no worker was killed (nothing to take over)"
	case len(parts) == 0:
		c.Summary = "the killed worker held no run"
	default:
		c.Summary = strings.Join(parts, "; ") + fmt.Sprintf(" (lease TTL %s)", a.LeaseTTL)
	}
	return c
}

// printVerdict writes the verdict and reports whether every check passed.
func printVerdict(w io.Writer, checks []check, records int) bool {
	fmt.Fprintf(w, "Verdict (computed from %d recorded events):\n", records)
	ok := true
	for _, c := range checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
			ok = false
		}
		fmt.Fprintf(w, "  %s  %-24s %s\n", mark, c.Name, c.Summary)
		for i, f := range c.Failures {
			if i == 8 {
				fmt.Fprintf(w, "          ... and %d more\n", len(c.Failures)-i)
				break
			}
			fmt.Fprintf(w, "          - %s\n", f)
		}
	}
	if ok {
		fmt.Fprintln(w, "PASS: every guarantee held")
	} else {
		fmt.Fprintln(w, "FAIL: a guarantee broke")
	}
	return ok
}

// short abbreviates a run id for display.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// roundDur rounds d for display.
func roundDur(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
