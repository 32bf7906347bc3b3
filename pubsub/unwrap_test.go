package pubsub_test

import (
	"context"
	"testing"

	"github.com/leasebus/leasebus/pubsub"
)

// plainBus is a PubSub with no optional capability.
type plainBus struct{ pubsub.PubSub }

// drainedBus has pubsub.DrainedDeleter.
type drainedBus struct{ pubsub.PubSub }

func (drainedBus) DeleteTopicIfDrained(context.Context, string, string) (bool, error) {
	return true, nil
}

// wrapper hides what it wraps, except through Unwrap.
type wrapper struct {
	pubsub.PubSub
	inner pubsub.PubSub
}

func (w wrapper) Unwrap() pubsub.PubSub { return w.inner }

// loop unwraps to itself.
type loop struct{ pubsub.PubSub }

func (l *loop) Unwrap() pubsub.PubSub { return l }

func TestAs(t *testing.T) {
	d := drainedBus{}
	if _, ok := pubsub.As[pubsub.DrainedDeleter](d); !ok {
		t.Error("As did not find DrainedDeleter on the PubSub itself")
	}
	w := wrapper{inner: wrapper{inner: d}}
	got, ok := pubsub.As[pubsub.DrainedDeleter](w)
	if !ok {
		t.Fatal("As did not find DrainedDeleter two wrappers down")
	}
	if _, isD := got.(drainedBus); !isD {
		t.Errorf("As found %T, want the wrapped drainedBus", got)
	}
	if _, ok := pubsub.As[pubsub.DrainedDeleter](wrapper{inner: plainBus{}}); ok {
		t.Error("As found DrainedDeleter where no layer has it")
	}
	if _, ok := pubsub.As[pubsub.DrainedDeleter](nil); ok {
		t.Error("As found DrainedDeleter on nil")
	}
	if _, ok := pubsub.As[pubsub.DrainedDeleter](wrapper{}); ok {
		t.Error("As found DrainedDeleter below a wrapper of nil")
	}
	if _, ok := pubsub.As[pubsub.BacklogReader](&loop{}); ok {
		t.Error("As found BacklogReader on a wrapper that unwraps to itself")
	}
}
