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
	if len(args) > 0 && args[0] == "revoke" {
		return runLeasesRevoke(ctx, e, args[1:]) // revoke.go
	}
	fs := newFlagSet(e, "leases", "leases [--prefix P] [--all] [--watch] [flags]\n       leasebus leases revoke KEY --reason R [--force] [flags]",
		`List the live leases of the deployment: key, holder, fencing token, time
left and status (active, or revoked and not yet released), sorted by key.
The signals runtime's done records ("signals.done.<thread>") are internal
records, not leases, and are left out unless --all. With --watch, redraw
every --interval until interrupted (Ctrl-C).

"leasebus leases revoke KEY --reason R" revokes a lease (see leasebus leases
revoke --help).`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	prefix := fs.String("prefix", "", "list only lease keys that start with this `prefix`")
	watch := fs.Bool("watch", false, "refresh the list every --interval until interrupted")
	interval := fs.Duration("interval", time.Second, "refresh `period` of --watch")
	all := fs.Bool("all", false, "also list the signals runtime's internal records")
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
		infos, statuses, err := leaseStatuses(ctx, b, infos, *all) // revoke.go
		if err != nil {
			if ctx.Err() != nil && *watch {
				return nil
			}
			return err
		}
		if *watch {
			if tty {
				fmt.Fprint(e.stdout, "\x1b[H\x1b[2J")
			}
			fmt.Fprintf(e.stdout, "%s  %d live lease(s)\n", time.Now().Format("15:04:05"), len(infos))
		}
		printLeases(e.stdout, infos, statuses, *prefix)
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
func printLeases(w io.Writer, infos []lease.Info, statuses map[string]lease.Status, prefix string) {
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
	fmt.Fprintln(tw, "KEY\tHOLDER\tTOKEN\tTIME LEFT\tSTATUS")
	for _, in := range infos {
		status := statuses[in.Key]
		if status == "" {
			status = lease.StatusActive
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", in.Key, in.Owner, in.Token, in.TTL.Round(100*time.Millisecond), status)
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
