package redisstreams

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// lostReplyHook, on a node client of a ClusterClient, lets the first
// command carrying the argument mark run, then reports its reply lost
// (io.EOF, as when the connection drops after the server ran it) once
// the test is told (ran) and lets it go on (resume). go-redis's
// ClusterClient sends such a command again (shouldRetry: EOF), to the
// same node first.
type lostReplyHook struct {
	mark        string
	armed       *atomic.Bool
	ran, resume chan struct{}
}

func (h lostReplyHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h lostReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h lostReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if slices.Contains(cmd.Args(), any(h.mark)) && err == nil && h.armed.CompareAndSwap(true, false) {
			close(h.ran)
			<-h.resume
			cmd.SetErr(io.EOF)
			return io.EOF
		}
		return err
	}
}

// TestForceRevokeNotRunAgainAfterLostReplyDuringSlotMove: leasemigrating.go
// sends a lease script again while its error is TRYAGAIN, ASK or MOVED, on
// the premise that such a refusal means the script did not run. But the
// error is only that of go-redis's LAST internal attempt: a script that ran
// on the first attempt, whose reply was lost (EOF, read timeout: go-redis
// retries both), and whose retry met a slot migration that had begun in
// between, ends with TRYAGAIN although it ran. A forced revoke deletes the
// lease key, so its second run found no live lease (ForceRevokeLease then
// returned lease.ErrNotHeld, "key has no live lease", for a lease it did
// revoke), or, when a new owner took the freed key between the two runs
// (what a forced revoke is for; that owner's acquire waited for the same
// migration), it force-revoked that new tenure (helper 51's review of
// eda57d8). revoke.lua now keeps the call's nonce: the second run reports
// the revoke done and touches nothing.
func TestForceRevokeNotRunAgainAfterLostReplyDuringSlotMove(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	const reason = "lost-reply-rerun-test"
	var armed atomic.Bool
	h := lostReplyHook{mark: reason, armed: &armed, ran: make(chan struct{}), resume: make(chan struct{})}
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
	b := psBackend(t, cc, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	const key = "victim"
	if r, err := b.AcquireLease(ctx, key, "old", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(old) = %+v, %v", r, err)
	}

	armed.Store(true)
	revoked := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		revoked <- b.ForceRevokeLease(cctx, key, reason)
	}()
	select {
	case <-h.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoke never ran")
	}
	// The script ran (old's lease is deleted); its reply is lost, and the
	// slot starts migrating before go-redis tries again.
	m := cl.StartSlotMove(t, b.keys.Lease(key))
	close(h.resume)

	// A new owner takes the key the revoke freed; its acquire, like the
	// revoke's retry, waits for the move.
	type acq struct {
		r   lease.Result
		err error
	}
	acquired := make(chan acq, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		r, err := b.AcquireLease(cctx, key, "new", time.Minute)
		acquired <- acq{r, err}
	}()
	time.Sleep(500 * time.Millisecond)
	for m.MigrateRest() > 0 {
	}
	m.Finish()

	rerr := <-revoked
	a := <-acquired
	st, serr := b.LeaseState(ctx, key)
	t.Logf("ForceRevokeLease: %v; AcquireLease(new): %+v, %v; state now: %+v, %v", rerr, a.r, a.err, st, serr)
	if errors.Is(rerr, lease.ErrNotHeld) {
		t.Errorf("ForceRevokeLease deleted old's lease but returned %v: its script ran twice (the TRYAGAIN it got was the retry's, after a lost reply)", rerr)
	}
	if a.err == nil && a.r.Acquired && (st.Owner != "new" || st.Status != lease.StatusActive) {
		t.Errorf("new acquired the freed key (token %d), but its tenure is now %+v: the forced revoke of old ran again on it", a.r.Token, st)
	}
}
