package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

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
the last signal was sent. QUEUED and LAST SIGNAL count the thread's inbox, where
each "threads cancel --drop-queued" also puts a mark (one entry, until a run
or a recovery takes it). With --watch, redraw every --interval until
interrupted (Ctrl-C).

"leasebus threads cancel THREAD" cancels the run holding THREAD, wherever
it runs (see leasebus threads cancel --help).`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	prefix := fs.String("prefix", "", "list only threads whose name starts with this `prefix`")
	w := fs.watchFlags()
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

	return w.refresh(ctx, e, func() (string, func(), error) {
		list, err := c.List(ctx, *prefix)
		if err != nil {
			return "", nil, err // "signals: list threads: ..."
		}
		now := time.Now()
		return fmt.Sprintf("%d thread(s) held", len(list)), func() { printThreads(e.stdout, list, *prefix, now) }, nil
	})
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
within --timeout (the cancel may not have reached it).`)
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
	res, err := c.Cancel(cctx, thread, *reason, opts...)
	switch {
	case errors.Is(err, signals.ErrUnreachable):
		return fmt.Errorf("thread %s: %w", thread, err)
	case err != nil:
		return err
	case res.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled run %s of thread %s on %s (token %d)\n", res.RunID, thread, res.Process, res.Token)
	case res.Owner == "":
		fmt.Fprintf(e.stdout, "no run to cancel: no process holds thread %s\n", thread)
	default:
		fmt.Fprintf(e.stdout, "no run to cancel: thread %s is held by %s, which has no run active\n", thread, res.Owner)
	}
	if *drop && res.Process != "" {
		fmt.Fprintln(e.stdout, "the signals queued before the cancel are dropped by the owner")
	}
	return nil
}
