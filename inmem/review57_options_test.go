package inmem

import (
	"errors"
	"strings"
	"testing"
)

// TestReview57NilManualClockRejected: NewWithOptions returns "an error
// wrapping ErrInvalid that names a bad field" (inmem/backend.go). A
// Clock that is a nil *ManualClock (a field left unset through a
// variable, `var c *inmem.ManualClock; Options{Clock: c}`) is not nil as
// an interface, so validate keeps it, and NewWithOptions panics with a nil
// pointer dereference on its first Now.
func TestReview57NilManualClockRejected(t *testing.T) {
	var c *ManualClock
	var (
		b   *Backend
		err error
	)
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("NewWithOptions(Options{Clock: (*ManualClock)(nil)}) panicked: %v", r)
			}
		}()
		b, err = NewWithOptions(Options{Clock: c})
	}()
	if err == nil {
		b.Close()
		t.Fatal("NewWithOptions(Options{Clock: (*ManualClock)(nil)}) accepted")
	}
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Clock") {
		t.Fatalf("got %v, want ErrInvalid naming Clock", err)
	}
}
