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

// TestNilClockRejected: NewWithOptions returns "an error wrapping
// ErrInvalid that names a bad field" (inmem/backend.go) for a Clock whose
// value is nil inside a non-nil interface (a field set through a variable
// left unset): a nil *ManualClock (review h57) and a nil func type (review
// h58). Before, validate kept them and NewWithOptions panicked on its
// first Now.
func TestNilClockRejected(t *testing.T) {
	var manual *ManualClock
	var fn clockFunc
	for name, c := range map[string]Clock{"ManualClockNilPointer": manual, "FuncNil": fn} {
		t.Run(name, func(t *testing.T) {
			var (
				b   *Backend
				err error
			)
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("NewWithOptions(Options{Clock: %T(nil)}) panicked: %v", c, r)
					}
				}()
				b, err = NewWithOptions(Options{Clock: c})
			}()
			if err == nil {
				b.Close()
				t.Fatalf("NewWithOptions(Options{Clock: %T(nil)}) accepted", c)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Clock") {
				t.Fatalf("got %v, want ErrInvalid naming Clock", err)
			}
		})
	}
}
