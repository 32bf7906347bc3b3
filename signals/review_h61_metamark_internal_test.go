package signals

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH61MarkPrefixedThreadFromOldProcess: a rolling upgrade. A
// process of the version before metaname.go (9fe2d9a) put every thread id
// and signal ID in wake notice metadata as itself; a valid UTF-8 thread id
// that happens to start with metaBytesMark (DESIGN: thread ids may hold any
// bytes) worked across such processes. Here an old process stored a signal
// of thread "\x00b64:YWJj" and handed back its notice as it always
// did (handBackNotices, or the plain notice of a Send during Close: no
// Action), with the name as itself. A new runtime takes the notice: it must
// run the signal on that thread. nameOf decodes "YWJj" and works on thread
// "abc" instead: a tenure of "abc" finds an empty inbox, settles the notice
// (settledByTenures) and acks it, and the signal stays in its inbox with
// no notice left to wake it.
func TestReviewH61MarkPrefixedThreadFromOldProcess(t *testing.T) {
	b := inmem.New()
	t.Cleanup(func() { b.Close() })
	thread := "\x00b64:YWJj" // valid UTF-8; "YWJj" is base64 of "abc"
	got := make(chan string, 8)
	agent := func(ctx context.Context, run *Run) error {
		for _, s := range run.Signals {
			got <- run.Thread + "|" + s.ID
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			got <- run.Thread + "|" + s.ID
		}
	}
	rt, err := New(b, agent, WithLeaseTTL(2*time.Second), WithRecoveryInterval(30*time.Second), WithLinger(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	// What the old version published: the names as themselves.
	old := pubsub.Event{Type: WakeType, Metadata: map[string]string{metaThread: thread, metaSignal: "s1"}}
	if err := publishSignal(context.Background(), b, thread, pubsub.Event{ID: "s1", Type: "msg"}, old); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if g != thread+"|s1" {
			t.Fatalf("ran %q, want %q", g, thread+"|s1")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("signal s1 of thread %q, announced by an old process's notice, not run within 10s", thread)
	}
}
