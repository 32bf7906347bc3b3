package pubsub_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/leasebus/leasebus/pubsub"
)

func TestPrepareEventFillsIn(t *testing.T) {
	before := time.Now()
	e, err := pubsub.PrepareEvent(pubsub.Event{Type: "t", DeliveryAttempt: 4})
	after := time.Now()
	if err != nil {
		t.Fatalf("PrepareEvent: %v", err)
	}
	if _, err := uuid.Parse(e.ID); err != nil {
		t.Errorf("assigned ID %q is not a UUID: %v", e.ID, err)
	}
	if e.CreatedAt.Before(before) || e.CreatedAt.After(after) {
		t.Errorf("assigned CreatedAt %v, want within [%v, %v]", e.CreatedAt, before, after)
	}
	if e.DeliveryAttempt != 0 {
		t.Errorf("DeliveryAttempt %d, want 0", e.DeliveryAttempt)
	}
	e2, _ := pubsub.PrepareEvent(pubsub.Event{Type: "t"})
	if e2.ID == e.ID {
		t.Errorf("two events got the same ID %q", e.ID)
	}
}

func TestPrepareEventKeepsGivenFields(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 5, time.UTC)
	in := pubsub.Event{
		ID: "id-1", Type: "t", RunID: "run", Data: []byte(`{}`),
		Metadata: map[string]string{"k": "v"}, CreatedAt: at,
	}
	e, err := pubsub.PrepareEvent(in)
	if err != nil {
		t.Fatalf("PrepareEvent: %v", err)
	}
	if e.ID != "id-1" || !e.CreatedAt.Equal(at) || e.RunID != "run" || string(e.Data) != "{}" || e.Metadata["k"] != "v" {
		t.Errorf("got %+v, want the given fields kept", e)
	}
}

func TestPrepareEventRejectsEmptyType(t *testing.T) {
	_, err := pubsub.PrepareEvent(pubsub.Event{ID: "e-7"})
	if !errors.Is(err, pubsub.ErrInvalid) {
		t.Fatalf("got %v, want an error wrapping ErrInvalid", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "type") || !strings.Contains(msg, "e-7") {
		t.Errorf("error %q should name the field and the event", msg)
	}
}

func TestPrepareSubscribe(t *testing.T) {
	ok := func(context.Context, pubsub.Event) error { return nil }
	if _, err := pubsub.PrepareSubscribe("", ok); !errors.Is(err, pubsub.ErrInvalid) || !strings.Contains(err.Error(), "topic") {
		t.Errorf("empty topic: %v", err)
	}
	if _, err := pubsub.PrepareSubscribe("t", nil); !errors.Is(err, pubsub.ErrInvalid) || !strings.Contains(err.Error(), "handler") {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := pubsub.PrepareSubscribe("t", ok, pubsub.Concurrency(0)); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("bad option: %v", err)
	}
	c, err := pubsub.PrepareSubscribe("t", ok, pubsub.Group("g"))
	if err != nil || c.Group != "g" || c.Concurrency != pubsub.DefaultConcurrency {
		t.Errorf("got %+v, %v", c, err)
	}
}

func TestValidateTopic(t *testing.T) {
	if err := pubsub.ValidateTopic("a"); err != nil {
		t.Errorf("ValidateTopic(%q) = %v", "a", err)
	}
	if err := pubsub.ValidateTopic(""); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("ValidateTopic(\"\") = %v, want ErrInvalid", err)
	}
}

func TestDeadLetterTopic(t *testing.T) {
	if got := pubsub.DeadLetterTopic("jobs"); got != "jobs.dead" {
		t.Errorf("DeadLetterTopic(jobs) = %q, want %q", got, "jobs.dead")
	}
}

func TestErrorsAreDistinct(t *testing.T) {
	if errors.Is(pubsub.ErrClosed, pubsub.ErrInvalid) || errors.Is(pubsub.ErrInvalid, pubsub.ErrClosed) {
		t.Error("ErrClosed and ErrInvalid match each other")
	}
	for _, err := range []error{pubsub.ErrClosed, pubsub.ErrInvalid} {
		if !strings.HasPrefix(err.Error(), "pubsub: ") {
			t.Errorf("%q lacks the package prefix", err)
		}
	}
}
