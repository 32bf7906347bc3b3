package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestThreadsListAndCancel runs a signals runtime in this process on a
// redis-server, holds a thread with a blocked run and one queued signal, and
// checks "leasebus threads", "leasebus threads cancel" and that "leasebus
// leases" leaves the done records out (unless --all).
func TestThreadsListAndCancel(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, url, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	started, causes := make(chan string, 10), make(chan error, 10)
	agent := func(ctx context.Context, run *signals.Run) error {
		started <- run.Signals[0].ID
		if run.Signals[0].ID == "block" {
			<-ctx.Done()
			causes <- context.Cause(ctx)
		}
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithProcessID("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, id := range []string{"block", "next"} {
		if _, err := rt.Send(ctx, "chat-42", signals.Signal{ID: id, Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := <-started; got != "block" {
		t.Fatalf("started %q, want block", got)
	}

	r := leasebus(t, 20*time.Second, "threads", "--redis", url)
	if r.code != 0 {
		t.Fatalf("threads: exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "THREAD") || !strings.Contains(lines[0], "QUEUED") {
		t.Fatalf("threads printed %q, want a header and one thread", r.stdout)
	}
	f := strings.Fields(lines[1])
	// THREAD PROCESS RUN TOKEN TIME-LEFT QUEUED IN-FLIGHT LAST(n ago)
	if len(f) < 8 || f[0] != "chat-42" || f[1] != "web-1" || f[5] != "1" || f[6] != "1" || !strings.HasSuffix(r.stdout, "ago\n") {
		t.Fatalf("threads row %q, want chat-42 held by web-1 with 1 queued, 1 in flight, and a last signal", lines[1])
	}

	r = leasebus(t, 20*time.Second, "threads", "cancel", "chat-42", "--reason", "user pressed stop", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "cancelled run ") || !strings.Contains(r.stdout, "of thread chat-42 on web-1") {
		t.Fatalf("threads cancel: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	select {
	case c := <-causes:
		var ce *signals.CancelError
		if !errors.As(c, &ce) || ce.Reason != "user pressed stop" {
			t.Fatalf("the run's cause = %v, want the cancel with its reason", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not cancelled")
	}
	if got := <-started; got != "next" {
		t.Fatalf("after the cancel started %q, want the queued signal next", got)
	}

	r = leasebus(t, 20*time.Second, "threads", "cancel", "nobody-home", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "no run to cancel: no process holds thread nobody-home") {
		t.Fatalf("threads cancel of a free thread: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = leasebus(t, 20*time.Second, "threads", "cancel", "--redis", url)
	if r.code != exitUsage || !strings.Contains(r.stderr, "want one THREAD") {
		t.Fatalf("threads cancel without THREAD: exit %d, stderr %q", r.code, r.stderr)
	}

	// The done record of chat-42 is an internal record, not a lease.
	r = leasebus(t, 20*time.Second, "leases", "--all", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "signals.done.chat-42") {
		t.Fatalf("leases --all: exit %d, stdout %q, stderr %q; want the done record listed", r.code, r.stdout, r.stderr)
	}
	r = leasebus(t, 20*time.Second, "leases", "--redis", url)
	if r.code != 0 || strings.Contains(r.stdout, "signals.done.") {
		t.Fatalf("leases: exit %d, stdout %q; want no internal records", r.code, r.stdout)
	}
}

// TestThreadsCancelUnreachable: a thread leased by a process that is not
// there; the cancel exits 1 naming it, within --timeout.
func TestThreadsCancelUnreachable(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.AcquireLease(context.Background(), signals.LeaseKey("t"), "gone-7/run-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	r := leasebus(t, 20*time.Second, "threads", "cancel", "t", "--timeout", "300ms", "--redis", srv.URL())
	if r.code != exitFailed || !strings.Contains(r.stderr, "owner unreachable") || !strings.Contains(r.stderr, "gone-7") {
		t.Fatalf("threads cancel with a dead owner: exit %d, stderr %q; want 1 and an unreachable error naming it", r.code, r.stderr)
	}
}

// TestLeasesRevoke revokes a lease with the command and checks what its
// holder and the listing see.
func TestLeasesRevoke(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, url, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r0, err := b.AcquireLease(ctx, "jobs/42", "worker-7", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	r := leasebus(t, 20*time.Second, "leases", "revoke", "jobs/42", "--redis", url)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--reason is required") {
		t.Fatalf("revoke without --reason: exit %d, stderr %q", r.code, r.stderr)
	}
	r = leasebus(t, 20*time.Second, "leases", "revoke", "jobs/42", "--reason", "stuck since 03:00", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "revoked lease jobs/42 of worker-7") || !strings.Contains(r.stdout, "stays held by worker-7") {
		t.Fatalf("revoke: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// A second revoke keeps the first reason (lease.Revoker) and says so
	// (review h54: it printed the first reason as this call's).
	r = leasebus(t, 20*time.Second, "leases", "revoke", "jobs/42", "--reason", "another reason", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "was already revoked: stuck since 03:00") || !strings.Contains(r.stdout, `--reason "another reason" not recorded`) {
		t.Fatalf("second revoke: exit %d, stdout %q, stderr %q; want it to say the lease was already revoked, with the first reason", r.code, r.stdout, r.stderr)
	}
	ok, err := b.RenewLease(ctx, "jobs/42", "worker-7", time.Minute)
	var re *lease.RevokedError
	if ok || !errors.As(err, &re) || re.Reason != "stuck since 03:00" {
		t.Fatalf("holder's renew after the revoke = %v, %v; want a RevokedError with the reason", ok, err)
	}
	r = leasebus(t, 20*time.Second, "leases", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "STATUS") || !strings.Contains(r.stdout, "revoked") {
		t.Fatalf("leases after the revoke: exit %d, stdout %q", r.code, r.stdout)
	}

	r = leasebus(t, 20*time.Second, "leases", "revoke", "jobs/42", "--force", "--reason", "holder is dead", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "the key is free") {
		t.Fatalf("revoke --force: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r1, err := b.AcquireLease(ctx, "jobs/42", "worker-8", time.Minute)
	if err != nil || !r1.Acquired || r1.Token <= r0.Token {
		t.Fatalf("acquire after the forced revoke = %+v, %v; want a new tenure with a higher token than %d", r1, err, r0.Token)
	}
	r = leasebus(t, 20*time.Second, "leases", "revoke", "jobs/none", "--reason", "x", "--redis", url)
	if r.code != exitFailed || !strings.Contains(r.stderr, "no live lease") {
		t.Fatalf("revoke of a free key: exit %d, stderr %q; want 1", r.code, r.stderr)
	}
}

func TestHelpOfControlCommands(t *testing.T) {
	for _, args := range [][]string{{"threads", "--help"}, {"threads", "cancel", "--help"}, {"leases", "revoke", "-h"}, {"help", "threads"}} {
		r := leasebus(t, 10*time.Second, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage") || r.stderr != "" {
			t.Errorf("leasebus %v: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", args, r.code, r.stdout, r.stderr)
		}
	}
	r := leasebus(t, 10*time.Second, "--help")
	for _, want := range []string{"threads", "threads cancel THREAD", "leases revoke KEY"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("leasebus --help lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestThreadsWatchRefreshes runs "threads --watch" and reads two refreshes.
func TestThreadsWatchRefreshes(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "threads", "--watch", "--interval", "100ms", "--redis", srv.URL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			t.Errorf("threads --watch after SIGINT: %v, want exit 0", err)
		}
	}()
	sc := bufio.NewScanner(out)
	refreshes := 0
	for refreshes < 2 && sc.Scan() {
		if strings.HasSuffix(sc.Text(), "0 thread(s) held") {
			refreshes++
		}
	}
	if refreshes < 2 {
		t.Fatalf("saw %d refreshes of threads --watch, want 2", refreshes)
	}
}

// TestLeasesRevokeToken: "leases revoke --token T" revokes only the tenure
// with fencing token T: one that ended (the same holder took the key again,
// with a new token) is not there to revoke, and the live tenure is left
// alone (exit 1, nothing revoked); the live tenure's own token revokes it.
// A token that is not a number is a usage error.
func TestLeasesRevokeToken(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, url, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r1, err := b.AcquireLease(ctx, "jobs/7", "worker-1", time.Minute)
	if err != nil || !r1.Acquired {
		t.Fatalf("acquire: %+v %v", r1, err)
	}
	if err := b.ReleaseLease(ctx, "jobs/7", "worker-1"); err != nil {
		t.Fatal(err)
	}
	r2, err := b.AcquireLease(ctx, "jobs/7", "worker-1", time.Minute)
	if err != nil || !r2.Acquired {
		t.Fatalf("second acquire: %+v %v", r2, err)
	}
	r := leasebus(t, 20*time.Second, "leases", "revoke", "jobs/7", "--force", "--reason", "stale", "--token", fmt.Sprint(r1.Token), "--redis", url)
	if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("no live tenure with token %d", r1.Token)) || !strings.Contains(r.stderr, "nothing revoked") || r.stdout != "" {
		t.Fatalf("revoke --token of an ended tenure: exit %d, stdout %q, stderr %q; want exit 1 saying nothing was revoked", r.code, r.stdout, r.stderr)
	}
	if st, err := b.LeaseState(ctx, "jobs/7"); err != nil || st.Status != lease.StatusActive || st.Token != r2.Token {
		t.Fatalf("after a revoke of an ended tenure: %+v, %v; want token %d active", st, err, r2.Token)
	}
	r = leasebus(t, 20*time.Second, "leases", "revoke", "jobs/7", "--reason", "x", "--token", "abc", "--redis", url)
	if r.code != exitUsage || !strings.Contains(r.stderr, "token") {
		t.Fatalf("revoke --token abc: exit %d, stderr %q; want a usage error naming --token", r.code, r.stderr)
	}
	r = leasebus(t, 20*time.Second, "leases", "revoke", "jobs/7", "--force", "--reason", "stuck", "--token", fmt.Sprint(r2.Token), "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("revoked lease jobs/7 of worker-1 (token %d): stuck", r2.Token)) || !strings.Contains(r.stdout, "the key is free") {
		t.Fatalf("revoke --token of the live tenure: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
