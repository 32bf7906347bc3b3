package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/signals"
)

// runThreads lists the threads of a signals deployment, or with "cancel"
// cancels a thread's running run.
func runThreads(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "cancel" {
		return runThreadsCancel(ctx, e, args[1:])
	}
	fs := newFlagSet(e, "threads", "threads [--prefix P] [--watch] [flags]\n       leasebus threads cancel THREAD [--reason R] [--drop-queued] [flags]",
		`List the threads some process holds, sorted by name: the owning process and
run, the fencing token and time left of the thread's lease, the signals
queued (not taken by a run yet) and in flight (taken, not finished), and when
the last signal was sent. A thread no process holds is listed too, with "-"
for its process, run, token and time left, while signals wait in its inbox
(queued, or in flight with a run that is gone): its owner died or was cut
off, its lease ran out, and no runtime has taken it over yet (none is up,
say). QUEUED and LAST SIGNAL count the thread's inbox, where
each "threads cancel --drop-queued" also puts a mark (one entry, until a run
or a recovery takes it). With --watch, redraw every --interval until
interrupted (Ctrl-C). A listing that Redis has not answered within
--timeout fails (exit 1; with --watch the round shows the error and the
watch goes on).

"leasebus threads cancel THREAD" cancels the run holding THREAD, wherever
it runs (see leasebus threads cancel --help).`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	prefix := fs.String("prefix", "", "list only threads whose name starts with this `prefix`")
	w := fs.watchFlags()
	timeout := fs.timeoutFlag()
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected argument %q (see leasebus threads --help)", pos[0])
	}
	if err := w.check(); err != nil {
		return err
	}
	if err := checkTimeout(*timeout); err != nil {
		return err
	}
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	c, err := signals.NewController(ctx, b)
	if err != nil {
		return err
	}
	defer closeController(c)

	space, err := keys.NewSpace(*keyspace)
	if err != nil {
		return usageErrorf("--keyspace %q: %v", *keyspace, err)
	}

	return w.refresh(ctx, e, "list threads", *timeout, func(ctx context.Context) (string, func(), error) {
		list, waiting, err := listThreads(ctx, c, b, b.Client(), space, *prefix)
		if err != nil {
			return "", nil, err
		}
		now := time.Now()
		summary := fmt.Sprintf("%d thread(s) held", len(list)-waiting)
		if waiting > 0 {
			summary += fmt.Sprintf(", %d with signals waiting and no holder", waiting)
		}
		return summary, func() { printThreads(e.stdout, list, *prefix, now) }, nil
	})
}

// statusReaders is how many thread statuses listThreads reads at once: each
// takes several round trips, and a deployment after an outage can have
// thousands of threads to show (one after the other, 600 threads over a 2ms
// link took over 3s: TestReviewH74ThreadsManyLeftoverInboxes). Below the
// go-redis pool's size, so that the reads do not queue for connections.
const statusReaders = 8

// listThreads returns the threads whose name starts with prefix that some
// process holds (their leases, listed with in) and those no process holds
// whose inbox still has signals queued or in flight: their owner died or
// was cut off, its lease ran out, and no runtime took them over yet (none is
// up, say). It scans the inbox streams under space (the command speaks to
// one server, never a Cluster) and reads each thread with
// Controller.Status, statusReaders at a time. A listed lease released since
// is left out unless signals wait in its inbox. It returns the threads
// sorted by name and how many of them have no holder.
func listThreads(ctx context.Context, c *signals.Controller, in lease.Inspector, client redis.UniversalClient, space keys.Space, prefix string) ([]signals.ThreadStatus, int, error) {
	infos, err := in.ListLeases(ctx, signals.LeaseKey(prefix))
	if err != nil {
		return nil, 0, fmt.Errorf("signals: list threads: %w", err)
	}
	seen := make(map[string]bool, len(infos))
	var threads []string
	for _, info := range infos {
		if th, ok := strings.CutPrefix(info.Key, signals.LeaseKey("")); ok && th != "" && !seen[th] {
			seen[th] = true
			threads = append(threads, th)
		}
	}
	inboxes, err := untilDone(ctx, func(ctx context.Context) ([]string, error) {
		var threads []string
		it := client.ScanType(ctx, 0, space.StreamPattern(signals.InboxTopic(prefix)), 1000, "stream").Iterator()
		for it.Next(ctx) {
			topic, ok := space.ParseStream(it.Val())
			if !ok || !strings.HasPrefix(topic, signals.InboxTopic("")) {
				continue
			}
			if th := strings.TrimPrefix(topic, signals.InboxTopic("")); th != "" && !seen[th] {
				seen[th] = true
				threads = append(threads, th)
			}
		}
		return threads, it.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list inboxes: %w", err)
	}
	threads = append(threads, inboxes...)
	sts := make([]signals.ThreadStatus, len(threads))
	errs := make([]error, len(threads))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(statusReaders, len(threads)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sts[i], errs[i] = c.Status(ctx, threads[i])
			}
		}()
	}
feed:
	for i := range threads {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	var out []signals.ThreadStatus
	waiting := 0
	for i, st := range sts {
		switch {
		case errs[i] != nil:
			return nil, 0, errs[i]
		case st.Owner != "":
			out = append(out, st)
		case st.Queued > 0 || st.InFlight > 0:
			out = append(out, st)
			waiting++
		}
	}
	slices.SortFunc(out, func(a, b signals.ThreadStatus) int { return strings.Compare(a.Thread, b.Thread) })
	return out, waiting, nil
}

// printThreads writes the thread table; now dates the LAST SIGNAL column.
func printThreads(w io.Writer, list []signals.ThreadStatus, prefix string, now time.Time) {
	if len(list) == 0 {
		if prefix != "" {
			fmt.Fprintf(w, "no threads held with prefix %q\n", prefix)
		} else {
			fmt.Fprintln(w, "no threads held")
		}
		return
	}
	count := func(n int64) string {
		if n < 0 {
			return "?"
		}
		return fmt.Sprint(n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "THREAD\tPROCESS\tRUN\tTOKEN\tTIME LEFT\tQUEUED\tIN FLIGHT\tLAST SIGNAL")
	for _, st := range list {
		last := "-"
		if !st.LastSignal.IsZero() {
			last = now.Sub(st.LastSignal).Round(100*time.Millisecond).String() + " ago"
		}
		if st.Owner == "" {
			// Nobody holds it: its signals wait for a runtime to take it.
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\t%s\t%s\n", cell(st.Thread), count(st.Queued), count(st.InFlight), last)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", cell(st.Thread), cell(st.Process), cell(st.RunID), st.Token,
			st.TTL.Round(100*time.Millisecond), count(st.Queued), count(st.InFlight), last)
	}
	tw.Flush()
}

// runThreadsCancel cancels the running run of one thread.
func runThreadsCancel(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "threads cancel", "threads cancel THREAD [--reason R] [--drop-queued] [flags]",
		`Cancel the run holding THREAD, wherever it runs: its agent's context is
cancelled with a cause carrying --reason. The signals queued after it run
next, in order, unless --drop-queued. Prints what happened: the run cancelled,
or that no run was active. Exits 1 when the owning process did not answer
within --timeout (the cancel may not have reached it), and with --drop-queued
when no process holds THREAD: the holder drops the queued signals, so with
none nothing is dropped (they run when a runtime takes the thread).`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	reason := fs.String("reason", "cancelled with leasebus threads cancel", "the `reason` the run's agent sees")
	drop := fs.Bool("drop-queued", false, "also drop the signals queued for the thread (they are not run)")
	timeout := fs.Duration("timeout", signals.DefaultControlTimeout, "how long to wait for the owner's answer")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want one THREAD, got %d arguments (see leasebus threads cancel --help)", len(pos))
	}
	if *reason == "" {
		return usageErrorf("--reason is empty")
	}
	if *timeout <= 0 {
		return usageErrorf("--timeout %v is not positive", *timeout)
	}
	thread := pos[0]
	if thread == "" {
		return usageErrorf("THREAD is empty (see leasebus threads cancel --help)")
	}
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	c, err := signals.NewController(ctx, b)
	if err != nil {
		return err
	}
	defer closeController(c)
	var opts []signals.CancelOption
	if *drop {
		opts = append(opts, signals.DropQueued())
	}
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *drop {
		// The drop is applied by the holder the cancel reaches
		// (signals.DropQueued): with none, nothing would be dropped, and
		// Cancel would still write its drop mark into the inbox (a stream
		// for ever, for a mistyped THREAD or --keyspace). Say so instead.
		st, err := c.Status(cctx, thread)
		if err != nil {
			return fmt.Errorf("thread %s: %w", thread, err)
		}
		if st.Owner == "" {
			return notDropped(thread, st)
		}
	}
	res, err := c.Cancel(cctx, thread, *reason, opts...)
	switch {
	case errors.Is(err, signals.ErrUnreachable):
		return fmt.Errorf("thread %s: %w", thread, err)
	case err != nil:
		return err
	case res.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled run %s of thread %s on %s (token %d)\n", cell(res.RunID), cell(thread), cell(res.Process), res.Token)
	case res.Owner == "" && *drop:
		// Released since the Status above.
		return notDropped(thread, signals.ThreadStatus{Queued: -1})
	case res.Owner == "":
		fmt.Fprintf(e.stdout, "no run to cancel: no process holds thread %s\n", cell(thread))
	default:
		fmt.Fprintf(e.stdout, "no run to cancel: thread %s is held by %s, which has no run active\n", cell(thread), cell(res.Owner))
	}
	if *drop && res.Process != "" {
		fmt.Fprintln(e.stdout, "the signals queued before the cancel are dropped by the owner")
	}
	return nil
}

// notDropped is the error of "threads cancel --drop-queued" on a thread no
// process holds: there is no run to cancel and no holder to drop the queued
// signals, which run when a runtime takes the thread.
func notDropped(thread string, st signals.ThreadStatus) error {
	queued := "its queued signals were"
	if st.Queued >= 0 {
		queued = fmt.Sprintf("its %s were", plural(int(st.Queued+max(st.InFlight, 0)), "queued or in-flight signal"))
	}
	return fmt.Errorf("thread %s: no process holds it, so there is no run to cancel and %s not dropped (--drop-queued is applied by the holder); they run when a runtime takes the thread", thread, queued)
}
