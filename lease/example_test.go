package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

func ExampleProviderOf() {
	backend := inmem.New()
	defer backend.Close()

	p, ok := lease.ProviderOf(backend)
	fmt.Println(ok, p == lease.Provider(backend))

	// A backend that cannot lease falls back to the always-win Noop.
	p, ok = lease.ProviderOf(struct{}{})
	fmt.Println(ok, p == lease.Noop)
	// Output:
	// true true
	// false true
}

func ExampleKeep() {
	ctx := context.Background()
	backend := inmem.New()
	defer backend.Close()

	h, err := lease.Keep(ctx, backend, "thread/42", "worker-1", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s holds %q with token %d\n", h.Owner(), h.Key(), h.Token())

	// Run the guarded work under h.Context(): it is cancelled before the
	// lease could expire if renewal fails.
	_, err = lease.Keep(ctx, backend, "thread/42", "worker-2", 30*time.Second)
	fmt.Println(err)
	fmt.Println(errors.Is(err, lease.ErrHeld))

	if err := h.Release(ctx); err != nil {
		fmt.Println(err)
	}
	<-h.Done()
	fmt.Println(h.Err())
	// Output:
	// worker-1 holds "thread/42" with token 1
	// lease "thread/42" held by worker-1, expires in 30s
	// true
	// lease: released
}

func ExampleWait() {
	ctx := context.Background()
	backend := inmem.New()
	defer backend.Close()

	// worker-1 holds the lease for 50ms and never renews it.
	if _, err := backend.AcquireLease(ctx, "output.json", "worker-1", 50*time.Millisecond); err != nil {
		fmt.Println(err)
		return
	}

	// worker-2 gives up after 10ms: the error carries both causes.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err := lease.Wait(short, backend, "output.json", "worker-2", time.Minute, lease.Backoff{Min: time.Millisecond})
	fmt.Println(errors.Is(err, lease.ErrHeld), errors.Is(err, context.DeadlineExceeded))

	// worker-3 waits, and wins once worker-1's lease expires.
	r, err := lease.Wait(ctx, backend, "output.json", "worker-3", time.Minute, lease.Backoff{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Acquired, r.Owner, r.Token)
	// Output:
	// true true
	// true worker-3 2
}

func ExampleRevoker() {
	b := inmem.New()
	defer b.Close()
	ctx := context.Background()
	if _, err := b.AcquireLease(ctx, "jobs/42", "worker-7", time.Minute); err != nil {
		panic(err)
	}
	var rv lease.Revoker = b // an optional capability: find it with a type assertion
	if err := rv.RevokeLease(ctx, "jobs/42", "stuck since 03:00"); err != nil {
		panic(err)
	}
	_, err := b.RenewLease(ctx, "jobs/42", "worker-7", time.Minute) // the holder's next renewal
	fmt.Println(errors.Is(err, lease.ErrRevoked), err)
	r, _ := b.AcquireLease(ctx, "jobs/42", "worker-8", time.Minute) // still held until worker-7 stops
	fmt.Println("worker-8 acquired:", r.Acquired)
	_ = b.ReleaseLease(ctx, "jobs/42", "worker-7")
	st, _ := rv.LeaseState(ctx, "jobs/42")
	fmt.Println(st.Status, st.Reason)
	// Output:
	// true lease "jobs/42" of worker-7 revoked: stuck since 03:00
	// worker-8 acquired: false
	// revoked stuck since 03:00
}
