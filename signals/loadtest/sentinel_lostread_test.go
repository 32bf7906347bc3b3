package loadtest_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// stallingBackend is a redisstreams.Backend (every capability promoted)
// that stalls replication right after the publish of one signal returned
// nil (so that signal is accepted and on the replica), and holds back the
// kicks of the inbox subscriptions until then, so that the tenure's read
// of that signal is among the writes the master alone takes.
type stallingBackend struct {
	*redisstreams.Backend
	signalID string
	stall    func()
	armed    atomic.Bool
	stalled  chan struct{}
}

func (s *stallingBackend) PublishBatch(ctx context.Context, pubs []pubsub.Publication) error {
	ours := len(pubs) > 0 && pubs[0].Event.ID == s.signalID
	if ours {
		s.armed.Store(true)
	}
	err := s.Backend.PublishBatch(ctx, pubs)
	if ours && err == nil {
		s.stall()
		close(s.stalled)
	}
	return err
}

func (s *stallingBackend) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	sub, err := s.Backend.Subscribe(ctx, topic, h, opts...)
	if err != nil || !strings.HasPrefix(topic, signals.InboxTopic("")) {
		return sub, err
	}
	return &heldKicks{Subscription: sub, b: s}, nil
}

type heldKicks struct {
	pubsub.Subscription
	b *stallingBackend
}

func (k *heldKicks) Kick() {
	kick := func() {
		if kk, ok := k.Subscription.(pubsub.Kicker); ok {
			kk.Kick()
		}
	}
	if !k.b.armed.Load() {
		kick()
		return
	}
	go func() { <-k.b.stalled; kick() }()
}

// TestSentinelLostReadRunsAgain: with LeaseSyncReplicas and
// PublishSyncReplicas at 1 (the one replica), a signal accepted (its
// publish acknowledged by the replica) and then read by the thread's tenure
// while replication is stalled; the master is killed and the replica, which
// never saw the read, promoted. Asserted: the signal is given after the
// failover (an accepted signal is not lost, even when the record of its
// delivery is), and every time it is given after the first, it is marked
// Redelivered. Review revW (fifteenth pass) wrote it when the read was not
// waited for: the agent was given the signal in the stall, and again after
// the failover unmarked (the promoted master had it as never delivered).
// Now the read's pipeline ends with WAIT (redisstreams.runReads), and a
// read the replica did not acknowledge hands nothing on: the signal is
// given once, after the failover.
func TestSentinelLostReadRunsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover test: skipped under -short")
	}
	st := redistest.StartSentinel(t, 1)
	ctx := context.Background()
	b, err := redisstreams.New(st.Client(t), redisstreams.Options{Prefix: "slostread", LeaseSyncReplicas: 1, PublishSyncReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var resume func()
	sb := &stallingBackend{Backend: b, signalID: "s2", stalled: make(chan struct{}),
		stall: func() { resume = st.StallReplication(t) }}

	type given struct {
		id          string
		redelivered bool
		run         string
		at          time.Time
	}
	var mu sync.Mutex
	var gs []given
	gotS1, gotS2 := make(chan struct{}, 4), make(chan struct{}, 4)
	var s2Once atomic.Bool
	agent := func(ctx context.Context, r *signals.Run) error {
		note := func(s signals.Signal) (block bool) {
			mu.Lock()
			gs = append(gs, given{s.ID, s.Redelivered, r.ID, time.Now()})
			mu.Unlock()
			switch s.ID {
			case "s1":
				gotS1 <- struct{}{}
			case "s2":
				gotS2 <- struct{}{}
				return s2Once.CompareAndSwap(false, true) // the first run of s2 is cut by the failover
			}
			return false
		}
		for _, s := range r.Signals {
			if note(s) {
				<-ctx.Done()
				return ctx.Err()
			}
		}
		for {
			s, ok := r.Next(ctx)
			if !ok {
				return nil
			}
			if note(s) {
				<-ctx.Done()
				return ctx.Err()
			}
		}
	}
	rt, err := signals.New(sb, agent, signals.WithProcessID("A"), signals.WithLeaseTTL(2*time.Second),
		signals.WithNextWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	}()

	const th = "lostread"
	if _, err := rt.Send(ctx, th, signals.Signal{ID: "s1", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gotS1:
	case <-time.After(10 * time.Second):
		t.Fatal("s1 not given")
	}
	// The agent waits in Next once s1 is done (recorded and acked).
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		bl, err := b.GroupBacklog(ctx, signals.InboxTopic(th), signals.InboxGroup)
		if err == nil && bl.Pending == 0 && bl.Lag == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("s1 not acked within 10s: %+v, %v", bl, err)
		}
	}
	acc, err := rt.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"})
	if err != nil {
		t.Fatalf("Send s2: %v (want it accepted: published and acknowledged before the stall)", err)
	}
	t.Logf("s2 accepted: %v", acc.Action)
	// The stall lasts 1.5s: the tenure's read of s2 runs in it.
	givenInStall := false
	select {
	case <-gotS2:
		givenInStall = true
	case <-time.After(1500 * time.Millisecond):
	}
	old := st.Master()
	failedAt := time.Now()
	st.FailoverAfterKill(t, resume)
	old.Restart(t)
	waitReplicaOnline(t, st.Master().Addr(), redistest.FailoverTimeout)

	// A later signal brings a tenure back; it gets s2 (again).
	deadline := time.Now().Add(30 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := rt.Send(sctx, th, signals.Signal{ID: "s3", Type: "t"})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Send s3 after the rejoin: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := 0
		for _, g := range gs {
			if g.id == "s2" && g.at.After(failedAt) {
				n++
			}
		}
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("s2 not given after the failover (an accepted signal lost)")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("given in the stall: %v; given: %+v", givenInStall, gs)
	var s2 []given
	for _, g := range gs {
		if g.id == "s2" {
			s2 = append(s2, g)
		}
	}
	for _, g := range s2[1:] {
		if !g.redelivered {
			t.Errorf("s2 given again (run %s) not marked Redelivered, though run %s was given it before", g.run, s2[0].run)
		}
	}
}
