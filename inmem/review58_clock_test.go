package inmem

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// clockFunc is a Clock made of a function, as a user might write one.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// TestReview58NilFuncClockRejected: NewWithOptions now rejects a Clock that
// is a nil pointer (review h57), but a Clock of another kind whose nil value
// panics the same way (a nil func type, as lease.checkProvider already
// covers for providers: Map, Func, Chan, Slice) still passes validate and
// NewWithOptions panics on its first Now instead of returning ErrInvalid
// naming Clock.
func TestReview58NilFuncClockRejected(t *testing.T) {
	var c clockFunc
	var (
		b   *Backend
		err error
	)
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("NewWithOptions(Options{Clock: clockFunc(nil)}) panicked: %v", r)
			}
		}()
		b, err = NewWithOptions(Options{Clock: c})
	}()
	if err == nil {
		defer b.Close()
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("NewWithOptions accepted clockFunc(nil); its first use panicked: %v", r)
				}
			}()
			_, _ = b.AcquireLease(t.Context(), "k", "o", time.Second)
		}()
		t.Fatal("NewWithOptions(Options{Clock: clockFunc(nil)}) accepted")
	}
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Clock") {
		t.Fatalf("got %v, want ErrInvalid naming Clock", err)
	}
}
