package signals_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/signals"
)

// pipelineRetry sends, once armed, the first pipeline that adds a wake
// notice to the work topic a second time, 30ms after the first: what go-redis does when
// it retries a pipeline whose reply was lost (MaxRetries, 3 by default:
// "a client configured with retries may store an event twice").
type pipelineRetry struct {
	armed atomic.Bool
	once  sync.Once
	did   atomic.Bool
}

func (h *pipelineRetry) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineRetry) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineRetry) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.armed.Load() {
			return err
		}
		work := false // a publish pipeline: an XADD of a wake notice
		for _, c := range cmds {
			if a := c.Args(); strings.EqualFold(c.Name(), "xadd") && len(a) > 1 {
				if k, ok := a[1].(string); ok && strings.Contains(k, signals.WorkTopic) {
					work = true
				}
			}
		}
		first := false
		if work {
			h.once.Do(func() { first = true })
		}
		if !first {
			return err
		}
		time.Sleep(30 * time.Millisecond) // the reply was lost; go-redis sends it again
		h.did.Store(true)
		return next(ctx, cmds)
	}
}

// TestRetriedPublishCopyRead: a Send whose publish pipeline go-redis sent
// twice stores the signal and its wake notice twice, both notices with one
// ID. The live tenure reads both copies (the second is acked unrun, a
// duplicate): the signal runs once and no Recovered tenure is needed after
// the linger end. Found by review 16: with the kick marks of ac42c1e (per
// notice ID, whoever kicked), every kick for the second copy fell within
// 250ms of the first copy's and was skipped; the copy stayed unread until a
// Recovered tenure read it (5 of 5 runs), and after a Close and past the
// dedupe window, ran again. Now a source (Send, fan-out watch, notice
// handler) that sees the same notice ID again kicks again.
func TestRetriedPublishCopyRead(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	var runs atomic.Int32
	agent := func(ctx context.Context, run *signals.Run) error {
		return eachSignal(ctx, run, func(s signals.Signal) {
			if s.ID == "x" {
				runs.Add(1)
			}
		})
	}
	var tenures, recovered atomic.Int32
	h := &pipelineRetry{}
	rt, _ := urlRuntime(t, srv.URL(), "rr", "A", agent, h, signals.WithLinger(time.Second),
		signals.WithObserver(func(e signals.Event) {
			switch e.Kind {
			case signals.TenureStarted:
				tenures.Add(1)
			case signals.Recovered:
				recovered.Add(1)
			}
		}))
	// A tenure reading its inbox already.
	if _, err := rt.Send(ctx, "th", signals.Signal{ID: "w", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	h.armed.Store(true)
	if _, err := rt.Send(ctx, "th", signals.Signal{ID: "x", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	if !h.did.Load() {
		t.Fatal("the publish pipeline was not sent twice")
	}
	time.Sleep(3 * time.Second) // past the linger end
	t.Logf("x ran %d times; tenures %d, recovered %d", runs.Load(), tenures.Load(), recovered.Load())
	if runs.Load() != 1 {
		t.Errorf("x ran %d times", runs.Load())
	}
	if n := tenures.Load() + recovered.Load(); n != 1 {
		t.Errorf("%d tenures (%d recovered); want 1: the second copy was left unread by the live tenure", n, recovered.Load())
	}
}
