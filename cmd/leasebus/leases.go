package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/leasebus/leasebus/lease"
)

func runLeases(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "leases", "leases [--prefix P] [--watch] [flags]",
		`List the live leases of the deployment: key, holder, fencing token and
time left, sorted by key. With --watch, redraw every --interval until
interrupted (Ctrl-C).`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	prefix := fs.String("prefix", "", "list only lease keys that start with this `prefix`")
	watch := fs.Bool("watch", false, "refresh the list every --interval until interrupted")
	interval := fs.Duration("interval", time.Second, "refresh `period` of --watch")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected argument %q (see leasebus leases --help)", pos[0])
	}
	if *interval <= 0 {
		return usageErrorf("--interval %v is not positive", *interval)
	}
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	var insp lease.Inspector = b

	tty := isTerminal(e.stdout)
	for {
		infos, err := insp.ListLeases(ctx, *prefix)
		if err != nil {
			if ctx.Err() != nil && *watch {
				return nil
			}
			return fmt.Errorf("list leases: %w", err)
		}
		if *watch {
			if tty {
				fmt.Fprint(e.stdout, "\x1b[H\x1b[2J")
			}
			fmt.Fprintf(e.stdout, "%s  %d live lease(s)\n", time.Now().Format("15:04:05"), len(infos))
		}
		printLeases(e.stdout, infos, *prefix)
		if !*watch {
			return nil
		}
		if !tty {
			fmt.Fprintln(e.stdout)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
}

// printLeases writes the lease table.
func printLeases(w io.Writer, infos []lease.Info, prefix string) {
	if len(infos) == 0 {
		if prefix != "" {
			fmt.Fprintf(w, "no live leases with prefix %q\n", prefix)
		} else {
			fmt.Fprintln(w, "no live leases")
		}
		return
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOLDER\tTOKEN\tTIME LEFT")
	for _, in := range infos {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", in.Key, in.Owner, in.Token, in.TTL.Round(100*time.Millisecond))
	}
	tw.Flush()
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
