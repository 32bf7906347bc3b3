package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReviewH67RevokeReportsWhatItRevoked: "leases revoke KEY" reads the
// lease, then revokes whatever tenure holds KEY when the revoke runs. A lease
// that changes hands in between (a signals thread hands its lease over with
// TransferLease at every hand-off, each time with a new token) has the new
// holder's tenure revoked: the command must report that tenure (holder and
// token), the one its holder will see fail, not the one it read before.
//
// The proxy holds the revoke (matched by its reason) while the lease is
// transferred from worker-a to worker-b, then lets it through.
//
// Found by review h67 (2026-11-29): "revoked lease jobs/x of worker-a
// (token <a's>)" while worker-b's tenure was the one revoked (3 of 3).
func TestReviewH67RevokeReportsWhatItRevoked(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const key, reason = "jobs/x", "zz-stuck-since-0300"
	ra, err := b.AcquireLease(ctx, key, "worker-a", time.Minute)
	if err != nil || !ra.Acquired {
		t.Fatalf("acquire: %+v, %v", ra, err)
	}
	p := redistest.NewProxy(t, srv.Addr())
	hit := make(chan struct{})
	p.HoldNext(func(w []byte) bool {
		if bytes.Contains(w, []byte(reason)) {
			close(hit)
			return true
		}
		return false
	})
	cmd := exec.Command(bin, "leases", "revoke", key, "--reason", reason, "--redis", "redis://"+p.Addr())
	cmd.Env = append(os.Environ(), redisEnv+"=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-hit:
	case err := <-done:
		t.Fatalf("leases revoke exited (%v) before sending the revoke: %q %q", err, out.String(), errb.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the revoke was never sent")
	}
	// The lease changes hands while the revoke is on its way.
	if ok, err := b.TransferLease(ctx, key, "worker-a", "worker-b", time.Minute); err != nil || !ok {
		t.Fatalf("transfer: %v, %v", ok, err)
	}
	p.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("leases revoke: %v, stderr %q", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("leases revoke did not exit")
	}
	st, err := b.LeaseState(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stdout %q; the lease now: %+v", out.String(), st)
	if st.Status != lease.StatusRevoked || st.Owner != "worker-b" {
		t.Fatalf("lease state %+v; want worker-b's tenure revoked", st)
	}
	first := strings.SplitN(out.String(), "\n", 2)[0]
	if strings.Contains(first, "worker-a") || !strings.Contains(first, "worker-b") || !strings.Contains(first, fmt.Sprint(st.Token)) {
		t.Errorf("leases revoke printed %q; want it to name the tenure it revoked: worker-b, token %d (worker-a's token was %d)", first, st.Token, ra.Token)
	}
}
