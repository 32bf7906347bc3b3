package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/leasebus/leasebus/lease"
)

func runLeases(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "revoke" {
		return runLeasesRevoke(ctx, e, args[1:]) // revoke.go
	}
	fs := newFlagSet(e, "leases", "leases [--prefix P] [--all] [--watch] [flags]\n       leasebus leases revoke KEY --reason R [--force] [--token T] [flags]",
		`List the live leases of the deployment: key, holder, fencing token, time
left and status (active, or revoked and not yet released), sorted by key.
The signals runtime's done records ("signals.done.<thread>") are internal
records, not leases, and are left out unless --all. With --watch, redraw
every --interval until interrupted (Ctrl-C). A listing that Redis has not
answered within --timeout fails (exit 1; with --watch the round shows the
error and the watch goes on).

"leasebus leases revoke KEY --reason R" revokes a lease (see leasebus leases
revoke --help).`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	prefix := fs.String("prefix", "", "list only lease keys that start with this `prefix`")
	w := fs.watchFlags()
	all := fs.Bool("all", false, "also list the signals runtime's internal records")
	timeout := fs.timeoutFlag()
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected argument %q (see leasebus leases --help)", pos[0])
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
	var insp lease.Inspector = b

	return w.refresh(ctx, e, "list leases", *timeout, func(ctx context.Context) (string, func(), error) {
		infos, err := insp.ListLeases(ctx, *prefix)
		if err != nil {
			return "", nil, fmt.Errorf("list leases: %w", err)
		}
		infos, statuses, err := leaseStatusesConcurrently(ctx, b, infos, *all)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("%d live lease(s)", len(infos)), func() { printLeases(e.stdout, infos, statuses, *prefix) }, nil
	})
}

// leaseStatusesConcurrently is leaseStatuses (revoke.go) on statusReaders disjoint
// parts of infos at once: it reads one status per lease, a round trip each,
// and one after the other 2,000 leases over a 2ms link took 5.5s
// (TestReviewH74LeasesMany). The leases it returns keep the order of infos.
func leaseStatusesConcurrently(ctx context.Context, rv lease.Revoker, infos []lease.Info, all bool) ([]lease.Info, map[string]lease.Status, error) {
	parts := min(statusReaders, len(infos))
	if parts <= 1 {
		return leaseStatuses(ctx, rv, infos, all)
	}
	type part struct {
		infos    []lease.Info
		statuses map[string]lease.Status
		err      error
	}
	res := make([]part, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*len(infos)/parts, (i+1)*len(infos)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			// leaseStatuses filters its slice in place: each part has its own.
			res[i].infos, res[i].statuses, res[i].err = leaseStatuses(ctx, rv, infos[lo:hi:hi], all)
		}()
	}
	wg.Wait()
	out := make([]lease.Info, 0, len(infos))
	statuses := make(map[string]lease.Status, len(infos))
	for _, r := range res {
		if r.err != nil {
			return nil, nil, r.err
		}
		out = append(out, r.infos...)
		maps.Copy(statuses, r.statuses)
	}
	return out, statuses, nil
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cell(in.Key), cell(in.Owner), in.Token, in.TTL.Round(100*time.Millisecond), status)
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
