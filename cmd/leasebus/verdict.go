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
	Worker, Thread, ID string          // who ran it, on which thread, its run id
	Token              uint64          // the fencing token of its lease tenure
	StartSeq, EndSeq   int             // stream positions of its start and end (the kill, for a killed run)
	Start, End         time.Time       // server times of the same
	Outcome            string          // runDone, runFailed, runKilled, runOpen
	Err                string          // the agent's error (runFailed)
	Signals            []string        // given to the run, in order
	Did                map[string]bool // of Signals, those whose work the run finished
	Redelivered        map[string]bool // of Signals, those marked redelivered
	Rogue              bool            // fault injection: ran without the lease
	Unstarted          bool            // handed the lease, its worker was killed before the agent started
	Via                string          // how its tenure began: viaAcquire, viaHandoff, viaTakeover, or "" for a follow-up run of the same tenure
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

// sentSignal is a signal Send accepted.
type sentSignal struct {
	Thread, Worker, Action string // its thread, the sender, Send's action
	Seq                    int    // stream position of the record
}

// handoff is a lease moving from one run to the next with TransferLease.
type handoff struct {
	Thread, Worker   string    // the thread, the worker of both runs
	PrevRun, Run     string    // the run handing over, the run taking over
	PrevToken, Token uint64    // their fencing tokens
	Seq              int       // stream position of the record
	At               time.Time // server time of the record
	NextRun          *demoRun  // the run that started next on the thread
	PrevWorker       string    // the worker of the run handing over
}

// kill is the demo SIGKILLing a worker.
type kill struct {
	Worker string    // the killed worker
	Seq    int       // stream position of the record
	At     time.Time // server time of the record
}

// takeover is what became of a thread the killed worker was running.
type takeover struct {
	Thread    string        // the thread
	From, To  string        // the killed worker, the worker that took over
	Token     uint64        // the token of the run that took over
	After     time.Duration // from the kill to that run's start
	Kill      kill          // the kill
	TakenOver bool          // a run started on the thread after the kill
	KilledRun *demoRun      // the killed worker's run on the thread
	NewRun    *demoRun      // the first run after the kill
	Needed    bool          // the killed run had signals it had not finished
}

// analysis is what the demo records say happened.
type analysis struct {
	// Begin is when the demo told the workers to start; Finish when it
	// stopped them (the first and last record when those are missing).
	Begin, Finish time.Time
	Records       int                   // number of records
	Threads       []string              // the demo's threads, then any other a run named
	Runs          map[string][]*demoRun // thread -> runs in start order
	Sent          map[string]sentSignal // signal id -> who sent it
	SendFailures  []string              // one line per failed Send
	Handoffs      []*handoff            // in stream order
	Kills         []kill                // in stream order
	Takeovers     []*takeover           // per kill and thread the killed worker was running
	Released      map[string]time.Time  // run id -> when its tenure released the lease (observer "released")
	Workers       []string              // the workers that reported ready, in stream order
	SentAll       map[string]bool       // the workers that sent their whole share of the signals
	StopWhy       string                // why the demo stopped ("done", "duration"; "" without a stop record)
	LeaseTTL      time.Duration         // the demo's lease TTL
	Recovery      time.Duration         // the runtimes' recovery interval
}

// analyze builds the analysis from the demo records (in stream order).
func analyze(recs []record, threads []string, ttl, recovery time.Duration) *analysis {
	a := &analysis{
		Records: len(recs), Threads: threads, Runs: map[string][]*demoRun{}, Sent: map[string]sentSignal{},
		Released: map[string]time.Time{}, SentAll: map[string]bool{}, LeaseTTL: ttl, Recovery: recovery,
	}
	if len(recs) > 0 {
		a.Begin, a.Finish = recs[0].At, recs[len(recs)-1].At
	}
	for _, r := range recs {
		switch r.Kind {
		case recBegin:
			a.Begin = r.At
		case recStop:
			a.Finish = r.At
			a.StopWhy = r.Get("why")
		}
	}
	byID := map[string]*demoRun{}
	tenure := map[string]string{} // run id -> how its tenure began (from the observer)
	lastSeq := 0
	for _, r := range recs {
		lastSeq = r.Seq
		switch r.Kind {
		case recReady:
			a.Workers = append(a.Workers, r.Worker)
		case recSent:
			a.Sent[r.Get("sig")] = sentSignal{Thread: r.Get("th"), Worker: r.Worker, Action: r.Get("act"), Seq: r.Seq}
		case recSendFail:
			a.SendFailures = append(a.SendFailures, fmt.Sprintf("%s: send %s to %s: %s", r.Worker, r.Get("sig"), r.Get("th"), r.Get("err")))
		case recSentAll:
			a.SentAll[r.Worker] = true
		case recStart, recRogue:
			run := &demoRun{
				Worker: r.Worker, Thread: r.Get("th"), ID: r.Get("run"), Token: r.Token("tok"),
				StartSeq: r.Seq, Start: r.At, EndSeq: -1, Outcome: runOpen,
				Signals: r.List("sigs"), Did: map[string]bool{}, Redelivered: map[string]bool{}, Rogue: r.Kind == recRogue,
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
		case recDid:
			if run := byID[r.Worker+"/"+r.Get("run")]; run != nil {
				run.Did[r.Get("sig")] = true
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
			case "released":
				a.Released[r.Get("run")] = r.At
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
			if run.End.Before(run.Start) {
				run.End = run.Start
			}
			if run.Via == "" {
				run.Via = tenure[run.ID]
			}
		}
	}
	a.addUnstarted(byID)
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

// addUnstarted adds the runs a hand-off gave the lease to whose worker was
// killed before their agent recorded its start: the worker held the thread
// from the hand-off until the kill, and somebody has to take it over.
func (a *analysis) addUnstarted(byID map[string]*demoRun) {
	for _, h := range a.Handoffs {
		if byID[h.Worker+"/"+h.Run] != nil {
			continue
		}
		for _, k := range a.Kills {
			if k.Worker != h.Worker || k.Seq < h.Seq {
				continue
			}
			run := &demoRun{
				Worker: h.Worker, Thread: h.Thread, ID: h.Run, Token: h.Token,
				StartSeq: h.Seq, Start: h.At, EndSeq: k.Seq, End: k.At, Outcome: runKilled,
				Did: map[string]bool{}, Redelivered: map[string]bool{}, Via: viaHandoff, Unstarted: true,
			}
			byID[h.Worker+"/"+h.Run] = run
			runs := append(a.Runs[h.Thread], run)
			sort.SliceStable(runs, func(i, j int) bool { return runs[i].StartSeq < runs[j].StartSeq })
			a.Runs[h.Thread] = runs
			break
		}
	}
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
			t := &takeover{Thread: th, From: k.Worker, Kill: k, KilledRun: killed, Needed: len(killed.pending()) > 0}
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

// pending returns the signals the run was given and did not finish.
func (r *demoRun) pending() []string {
	var p []string
	for _, id := range r.Signals {
		if !r.Did[id] {
			p = append(p, id)
		}
	}
	return p
}

// check is one guarantee the verdict checks.
type check struct {
	Name     string   // the guarantee
	OK       bool     // it held
	Summary  string   // one line of what the records show
	Failures []string // one line per violation
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
		for i, cur := range runs {
			// Against every earlier run, not only the one just before: a
			// long run may overlap several later ones.
			for _, prev := range runs[:i] {
				if cur.StartSeq < prev.EndSeq {
					c.Failures = append(c.Failures, fmt.Sprintf("%s: run %s (%s, token %d) started while run %s (%s, token %d) was still running",
						th, short(cur.ID), cur.Worker, cur.Token, short(prev.ID), prev.Worker, prev.Token))
				}
			}
			if i > 0 && cur.Token <= runs[i-1].Token {
				c.Failures = append(c.Failures, fmt.Sprintf("%s: run %s (%s) has fencing token %d, not greater than %d of the run before it",
					th, short(cur.ID), cur.Worker, cur.Token, runs[i-1].Token))
			}
		}
	}
	c.OK = len(c.Failures) == 0
	c.Summary = fmt.Sprintf("%s on %s; fencing tokens strictly increasing per thread; no two runs of a thread overlapped", plural(n, "run"), plural(len(a.Threads), "thread"))
	if !c.OK {
		c.Summary = fmt.Sprintf("%s on %s; %s", plural(n, "run"), plural(len(a.Threads), "thread"), plural(len(c.Failures), "violation"))
	}
	return c
}

func (a *analysis) checkEverySignal() check {
	c := check{Name: "every signal ran"}
	given := map[string][]*demoRun{} // signal id -> the runs given it, in start order
	for _, th := range a.Threads {
		for _, run := range a.Runs[th] {
			if run.Rogue {
				continue
			}
			for _, id := range run.Signals {
				given[id] = append(given[id], run)
			}
		}
	}
	ran, again := 0, 0
	for _, id := range sortedKeys(a.Sent) {
		s := a.Sent[id]
		runs := given[id]
		var did []*demoRun // the runs that finished its work
		for i, run := range runs {
			if run.Thread != s.Thread {
				c.Failures = append(c.Failures, fmt.Sprintf("signal %s sent to %s ran on %s", id, s.Thread, run.Thread))
			}
			if i > 0 {
				// Given again: only after the run before it died or lost its lease.
				prev := runs[i-1]
				if prev.Outcome != runKilled && prev.Outcome != runFailed {
					c.Failures = append(c.Failures, fmt.Sprintf("signal %s of %s was given to run %s (%s) and again to run %s (%s) though the first was not killed",
						id, s.Thread, short(prev.ID), prev.Worker, short(run.ID), run.Worker))
				}
				if !run.Redelivered[id] {
					c.Failures = append(c.Failures, fmt.Sprintf("signal %s of %s was given again to run %s without the redelivered mark", id, s.Thread, short(run.ID)))
				}
				if run.Token <= prev.Token {
					c.Failures = append(c.Failures, fmt.Sprintf("signal %s of %s was given again to run %s with token %d, not above %d", id, s.Thread, short(run.ID), run.Token, prev.Token))
				}
			}
			if run.Did[id] {
				did = append(did, run)
			}
		}
		if len(did) == 0 {
			how := "was never given to a run"
			if len(runs) > 0 {
				last := runs[len(runs)-1]
				how = fmt.Sprintf("never finished (its last run %s on %s was %s)", short(last.ID), last.Worker, last.Outcome)
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
	// A worker stops sending when the demo stops it (--duration): the
	// signals it did not send did not run either.
	for _, w := range a.Workers {
		if !a.SentAll[w] {
			c.Failures = append(c.Failures, fmt.Sprintf("%s did not send all its signals before the demo stopped", w))
		}
	}
	// "Signals not run by then fail the verdict": --duration stopped the
	// demo before it saw every accepted signal run (one that finished
	// while the workers stopped ran after the bound).
	if a.StopWhy == "duration" {
		c.Failures = append(c.Failures, "the demo was stopped by --duration before every accepted signal had run")
	}
	if len(a.Sent) == 0 {
		c.Failures = append(c.Failures, "no signal was accepted")
	}
	c.OK = len(c.Failures) == 0
	c.Summary = fmt.Sprintf("%d/%s ran", ran, plural(len(a.Sent), "accepted signal"))
	if again > 0 {
		c.Summary += fmt.Sprintf("; %d given again after the kill, marked redelivered, with a higher token", again)
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
	c.Summary = fmt.Sprintf("%s, each by TransferLease straight to the next run with a higher token, no other tenure in between", plural(len(a.Handoffs), "hand-off"))
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
		switch {
		case !t.TakenOver && !t.Needed:
			parts = append(parts, fmt.Sprintf("%s: %s had finished its signals (nothing to take over)", t.Thread, t.From))
		case !t.TakenOver:
			c.Failures = append(c.Failures, fmt.Sprintf("%s: nobody took over after %s was killed working on %s",
				t.Thread, t.From, strings.Join(t.KilledRun.pending(), " ")))
		default:
			parts = append(parts, fmt.Sprintf("%s taken over by %s %s after %s was killed", t.Thread, t.To, roundDur(t.After), t.From))
			if t.After > bound {
				c.Failures = append(c.Failures, fmt.Sprintf("%s: takeover took %s, more than lease TTL %s + recovery", t.Thread, roundDur(t.After), a.LeaseTTL))
			}
		}
	}
	c.OK = len(c.Failures) == 0
	switch {
	case len(a.Kills) == 0:
		c.Summary = "no worker was killed (nothing to take over)"
	case len(a.Takeovers) == 0:
		c.Summary = "the killed worker held no run"
	case !c.OK:
		c.Summary = fmt.Sprintf("%s not taken over", plural(len(c.Failures), "thread"))
		if len(parts) > 0 {
			c.Summary += "; " + strings.Join(parts, "; ")
		}
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
