package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// span is the part of a stdouttrace span the test reads.
type span struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
}

// TestRun runs the example and reads what the stdout exporters wrote: the
// publish and process spans are one trace, so are the signals send and run
// spans, and the metrics include the event and signal counters.
func TestRun(t *testing.T) {
	var traces, metrics bytes.Buffer
	if err := run(context.Background(), &traces, &metrics); err != nil {
		t.Fatal(err)
	}
	spans := map[string]span{}
	dec := json.NewDecoder(&traces)
	for {
		var s span
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decode spans: %v\n%s", err, traces.String())
		}
		spans[s.Name] = s
	}
	for child, parent := range map[string]string{"process orders": "publish orders", "signals run": "publish signals.thread.*"} {
		c, p := spans[child], spans[parent]
		if c.Name == "" || p.Name == "" {
			t.Fatalf("spans %q and %q, want both; got %v", child, parent, spans)
		}
		if c.Parent.SpanID != p.SpanContext.SpanID || c.SpanContext.TraceID != p.SpanContext.TraceID {
			t.Errorf("%s: parent %s in trace %s, want %s (%s) in trace %s", child, c.Parent.SpanID, c.SpanContext.TraceID, parent, p.SpanContext.SpanID, p.SpanContext.TraceID)
		}
	}
	if s, p := spans["signals send"], spans["publish signals.thread.*"]; p.Parent.SpanID != s.SpanContext.SpanID {
		t.Errorf("the inbox publish's parent %s, want the send span %s", p.Parent.SpanID, s.SpanContext.SpanID)
	}
	for _, name := range []string{`"leasebus.events.published"`, `"leasebus.events.acked"`, `"leasebus.signals.sent"`,
		`"leasebus.signals.runs"`, `"leasebus.lease.acquires"`, `"leasebus.signals.send.duration"`} {
		if !strings.Contains(metrics.String(), name) {
			t.Errorf("metrics lack %s", name)
		}
	}
}
