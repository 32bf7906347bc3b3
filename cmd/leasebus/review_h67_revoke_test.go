package main

import (
	"bytes"
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
)

// TestReviewH67RevokeReportsWhatItRevoked: "leases revoke KEY" reads the
// lease, then revokes. A lease that changes hands in between (a signals
// thread hands its lease over with TransferLease at every hand-off, each
// time with a new token) must not be misreported.
//
// The proxy holds the revoke (matched by its reason) while the lease is
// transferred from worker-a to worker-b, then lets it through.
//
// Found by review h67 (2026-11-29): "revoked lease jobs/x of worker-a
// (token <a's>)" while worker-b's tenure was the one revoked (3 of 3). The
// command then reported worker-b's tenure, which it had revoked. Since
// lease.TokenRevoker (2026-11-30) it revokes only the tenure it read
// (worker-a's, token ra): it must revoke nothing, leave worker-b's tenure
// active, say that the lease changed hands and who holds it now, and exit 1
// (a revoke delivered late would otherwise hit a tenure nobody saw:
// TestLateForceRevokeTokenSparesNextTenure in redisstreams).
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
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("leases revoke: %v (want exit 1), stdout %q, stderr %q", err, out.String(), errb.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("leases revoke did not exit")
	}
	st, err := b.LeaseState(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stdout %q, stderr %q; the lease now: %+v", out.String(), errb.String(), st)
	if st.Status != lease.StatusActive || st.Owner != "worker-b" || !st.Live() {
		t.Fatalf("lease state %+v; want worker-b's tenure active: the command was to revoke only worker-a's (token %d)", st, ra.Token)
	}
	msg := errb.String()
	for _, want := range []string{"changed hands", "worker-a", fmt.Sprint(ra.Token), "worker-b", fmt.Sprint(st.Token), "nothing revoked"} {
		if !strings.Contains(msg, want) {
			t.Errorf("leases revoke's error %q does not say %q", msg, want)
		}
	}
	if out.Len() != 0 {
		t.Errorf("leases revoke printed %q on stdout; it revoked nothing", out.String())
	}
}
