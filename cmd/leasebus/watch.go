package main

import (
	"context"
	"fmt"
	"time"
)

// watchFlags are the --watch and --interval flags of a listing command.
type watchFlags struct {
	watch    *bool
	interval *time.Duration
}

// watchFlags adds --watch and --interval to fs.
func (fs *flagSet) watchFlags() watchFlags {
	return watchFlags{
		watch:    fs.Bool("watch", false, "refresh the list every --interval until interrupted"),
		interval: fs.Duration("interval", time.Second, "refresh `period` of --watch, at least 100ms"),
	}
}

// minWatchInterval is the shortest --interval: each round lists the
// deployment's keys with SCAN, which back to back (an --interval of 1ms, a
// typo for 1s) loads the very Redis the operator is watching.
const minWatchInterval = 100 * time.Millisecond

// check rejects an --interval that is not positive or below
// minWatchInterval.
func (w watchFlags) check() error {
	switch {
	case *w.interval <= 0:
		return usageErrorf("--interval %v is not positive", *w.interval)
	case *w.interval < minWatchInterval:
		return usageErrorf("--interval %v is below %v (each refresh scans the keyspace)", *w.interval, minWatchInterval)
	}
	return nil
}

// refresh lists once, or with --watch every --interval until ctx ends
// (then it returns nil, also when the listing failed because ctx ended).
// Each listing gets timeout (--timeout; bounded): one that has not returned
// by then fails, with an error that starts with what ("list leases"). list reads what to show and returns the header's summary ("3 live
// lease(s)") and a function that prints it. With --watch each round starts
// with the time and the summary; a terminal is cleared first, other output
// gets a blank line between rounds. A round whose listing failed (Redis
// stalled, say) shows the error in place of the list, and the watch goes on:
// it is how an operator sees Redis come back.
func (w watchFlags) refresh(ctx context.Context, e *env, what string, timeout time.Duration, list func(ctx context.Context) (summary string, print func(), err error)) error {
	type listed struct {
		summary string
		print   func()
	}
	tty := isTerminal(e.stdout)
	for {
		l, err := bounded(ctx, timeout, what, func(ctx context.Context) (listed, error) {
			summary, print, err := list(ctx)
			return listed{summary, print}, err
		})
		summary, print := l.summary, l.print
		if err != nil {
			if ctx.Err() != nil && *w.watch {
				return nil
			}
			if !*w.watch {
				return err
			}
			summary = "error: " + oneLine(err.Error()) + fmt.Sprintf(" (retrying every %v)", *w.interval)
			print = func() {}
		}
		if *w.watch {
			if tty {
				fmt.Fprint(e.stdout, "\x1b[H\x1b[2J")
			}
			fmt.Fprintf(e.stdout, "%s  %s\n", time.Now().Format("15:04:05"), summary)
		}
		print()
		if !*w.watch {
			return nil
		}
		if !tty {
			fmt.Fprintln(e.stdout)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*w.interval):
		}
	}
}
