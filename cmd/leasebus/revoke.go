package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// runLeasesRevoke revokes one lease.
func runLeasesRevoke(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "leases revoke", "leases revoke KEY --reason R [--force] [--token T] [--timeout D] [flags]",
		`Revoke the live lease on KEY. Its holder's next renewal fails with an error
matching lease.ErrRevoked that carries --reason, so a lease kept with
lease.Keep ends at its next renewal (its context is cancelled then; with
lease.Keep's default interval, within a third of the TTL). Without --force the key
stays held by the revoked holder until it releases it or the lease expires,
so nobody else can take it while the holder may still be working. --force
frees the key at once: use it only when the resource checks fencing tokens or
the holder is known to be dead.

The command revokes only the tenure it names: the one with --token (the TOKEN
column of "leasebus leases"), else the one it reads first and prints. When the
lease changed hands before the revoke ran (a signals thread hands its lease
over at every hand-off, with a new token; a dead holder's lease expired and
another process took the key), it revokes nothing, says who holds the key now,
and exits 1: run it again to revoke the new tenure. A revoke that the network
delivers late (the command gave up, the request ran later) so never touches a
later tenure either. Exits 1 when KEY has no live lease.`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	reason := fs.String("reason", "", "why the lease is revoked (required; the holder sees it)")
	force := fs.Bool("force", false, "free the key at once instead of waiting for the holder to stop")
	token := fs.Uint64("token", 0, "revoke only the tenure with this fencing `token` (default: the tenure the command reads first)")
	timeout := fs.timeoutFlag()
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := checkTimeout(*timeout); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want one KEY, got %d arguments (see leasebus leases revoke --help)", len(pos))
	}
	if *reason == "" {
		return usageErrorf("--reason is required")
	}
	key := pos[0]
	if key == "" {
		return usageErrorf("KEY is empty (see leasebus leases revoke --help)")
	}
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	var sent atomic.Bool
	out, err := bounded(ctx, *timeout, "", func(ctx context.Context) (string, error) {
		return revokeTenure(ctx, b, key, *reason, *force, *token, &sent)
	})
	if err != nil {
		var timedOut *timedOutError
		if sent.Load() && errors.As(err, &timedOut) {
			// The revoke was sent and its answer is missing: it may run
			// yet. It names its tenure, so it touches no other one.
			return fmt.Errorf("lease %q: %w; the revoke was sent and may still run, on that tenure only: check with leasebus leases", key, err)
		}
		return err
	}
	fmt.Fprint(e.stdout, out)
	return nil
}

// revokeTenure revokes the tenure of token on key (0: the tenure it reads
// first), forced or not, and returns what to print; it sets sent just
// before it sends the revoke.
func revokeTenure(ctx context.Context, b *redisstreams.Backend, key, reason string, force bool, token uint64, sent *atomic.Bool) (string, error) {
	var rv lease.Revoker = b
	var tr lease.TokenRevoker = b
	var out strings.Builder
	before, err := rv.LeaseState(ctx, key)
	if err != nil {
		return "", err
	}
	tok := token
	if tok == 0 {
		if !before.Live() {
			return "", fmt.Errorf("lease %q: no live lease to revoke", key)
		}
		tok = before.Token
	}
	sent.Store(true)
	if force {
		err = tr.ForceRevokeLeaseToken(ctx, key, reason, tok)
	} else {
		err = tr.RevokeLeaseToken(ctx, key, reason, tok)
	}
	if errors.Is(err, lease.ErrNotHeld) {
		now, serr := rv.LeaseState(ctx, key)
		if serr != nil {
			return "", fmt.Errorf("lease %q: no live tenure with token %d to revoke; nothing revoked", key, tok)
		}
		if token == 0 {
			return "", fmt.Errorf("lease %q changed hands before the revoke ran: %s held it (token %d), now %s; nothing revoked (run the command again to revoke the new tenure)",
				key, before.Owner, before.Token, describeState(now))
		}
		return "", fmt.Errorf("lease %q: no live tenure with token %d to revoke (now %s); nothing revoked", key, tok, describeState(now))
	}
	if err != nil {
		return "", err
	}
	after, err := rv.LeaseState(ctx, key)
	if err != nil {
		return "", err
	}
	switch {
	case after.Status != lease.StatusRevoked || after.Token != tok:
		// Released (or expired) and taken again since the revoke: the
		// revoked tenure's status cannot be read any more.
		fmt.Fprintf(&out, "revoked lease %s (token %d); it has changed hands since: now %s\n",
			key, tok, describeState(after))
		return out.String(), nil
	case !force && before.Status == lease.StatusRevoked && before.Token == tok:
		// RevokeLease keeps the first reason: say so rather than print
		// it as this call's.
		fmt.Fprintf(&out, "lease %s of %s (token %d) was already revoked: %s (--reason %q not recorded)\n",
			key, after.Owner, after.Token, after.Reason, reason)
	default:
		fmt.Fprintf(&out, "revoked lease %s of %s (token %d): %s\n", key, after.Owner, after.Token, after.Reason)
	}
	if after.Live() {
		fmt.Fprintf(&out, "the key stays held by %s until it releases it or the lease expires (in at most %s)\n",
			after.Owner, after.TTL.Round(100*time.Millisecond))
	} else {
		fmt.Fprintln(&out, "the key is free")
	}
	return out.String(), nil
}

// describeState returns "<owner> (token <t>, <status>)", or "free".
func describeState(st lease.State) string {
	if !st.Live() {
		return "free"
	}
	return fmt.Sprintf("%s (token %d, %s)", st.Owner, st.Token, st.Status)
}

// leaseStatuses drops the signals runtime's internal records from infos
// (unless all) and reads the status of each remaining lease.
func leaseStatuses(ctx context.Context, rv lease.Revoker, infos []lease.Info, all bool) ([]lease.Info, map[string]lease.Status, error) {
	out := infos[:0]
	statuses := make(map[string]lease.Status, len(infos))
	for _, in := range infos {
		if !all && signals.IsInternalLeaseKey(in.Key) {
			continue
		}
		st, err := rv.LeaseState(ctx, in.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("lease %q: %w", in.Key, err)
		}
		if !st.Live() {
			continue // ended since it was listed
		}
		statuses[in.Key] = st.Status
		out = append(out, in)
	}
	return out, statuses, nil
}
