package signals_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

type panicBatch struct {
	*inmem.Backend
	armed atomic.Bool
}

func (p *panicBatch) PublishBatch(ctx context.Context, ps []pubsub.Publication) error {
	if p.armed.CompareAndSwap(true, false) {
		panic("publish blew up")
	}
	return p.Backend.PublishBatch(ctx, ps)
}

// TestPanickedSendLetsTenureEnd: a tenure started by a Send whose publish
// panics (a wrapper's bug) still lingers out and releases the thread,
// rather than wait for that Send's signal until Close.
func TestPanickedSendLetsTenureEnd(t *testing.T) {
	b := inmem.New()
	defer b.Close()
	ps := &panicBatch{Backend: b}
	released := make(chan struct{}, 4)
	rt, err := signals.New(ps, func(ctx context.Context, r *signals.Run) error { return nil },
		signals.WithLinger(20*time.Millisecond), signals.WithLeaseTTL(time.Second),
		signals.WithObserver(func(e signals.Event) {
			if e.Kind == signals.Released {
				released <- struct{}{}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	ps.armed.Store(true)
	func() {
		defer func() { recover() }()
		_, _ = rt.Send(context.Background(), "th", signals.Signal{Type: "t"})
	}()
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Errorf("tenure started by a panicked Send did not end within 5s (linger 20ms)")
	}
}
