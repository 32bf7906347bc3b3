package main

import (
	"bytes"
	"context"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `worker-1 holds "report.pdf" with fencing token 1
after 1.5 TTLs of work it is still held by worker-1 (renewed by Keep)
worker-2 cannot take it: held by worker-1 (token 1), errors.Is(err, lease.ErrHeld) = true
worker-1 released it: lease: released
worker-2 acquired it with lease.Wait: token 2 (greater than 1)
worker-2 lost it: work context cancelled, errors.Is(held.Err(), lease.ErrNotHeld) = true
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
