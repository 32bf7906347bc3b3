package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The demo's workers and the parent record what happened as entries of one
// Redis stream (XADD, synchronously, before going on), so the record of a
// worker survives its SIGKILL. The stream's entry ids give one total order
// and one clock (the server's): an entry added after another in real time has
// a greater id, which is what the verdict's overlap check relies on.

// Kinds of demo records (field "k").
const (
	recReady    = "ready"     // a worker's runtime is up
	recSent     = "sent"      // Send accepted a signal: th, sig, act, run, owner
	recSendFail = "send-fail" // Send failed: th, sig, err
	recSentAll  = "sent-all"  // a worker sent all its signals
	recStart    = "start"     // an agent run started: th, run, tok, sigs, redel
	recSignal   = "signal"    // a run took a follow-up with Next: th, run, sig, redel
	recDid      = "did"       // a run finished the work of a signal (before it acks it by asking for the next): th, run, sig
	recEnd      = "end"       // an agent run returned: th, run, err ("" = finished its work)
	recObserved = "obs"       // a signals.Event: ev, th, run, owner, tok, prun, powner, ptok, err
	recBegin    = "begin"     // the parent told the workers to start sending (the timeline's 0s)
	recStop     = "stop"      // the parent stopped the demo (the timeline's end): why
	recKilled   = "killed"    // the parent SIGKILLed a worker (w)
	recRogue    = "rogue"     // fault injection: a run started without the lease (as recStart)
)

// record is one entry of the demo stream.
type record struct {
	Seq    int               // position in the stream
	At     time.Time         // server time of the XADD
	Kind   string            // one of the rec* kinds
	Worker string            // who wrote it: a worker's name, or "demo"
	Fields map[string]string // the other fields
}

// Get returns field k.
func (r record) Get(k string) string { return r.Fields[k] }

// Token returns field tok as a number.
func (r record) Token(k string) uint64 {
	n, _ := strconv.ParseUint(r.Fields[k], 10, 64)
	return n
}

// List returns a comma-separated field as a slice.
func (r record) List(k string) []string {
	if r.Fields[k] == "" {
		return nil
	}
	return strings.Split(r.Fields[k], ",")
}

// recorder appends records to the demo stream.
type recorder struct {
	client redis.UniversalClient
	stream string
	worker string
}

// add writes one record and returns once Redis stored it. kv alternates
// field names and values.
func (r *recorder) add(ctx context.Context, kind string, kv ...string) error {
	values := make([]any, 0, 4+len(kv))
	values = append(values, "k", kind, "w", r.worker)
	for _, s := range kv {
		values = append(values, s)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return r.client.XAdd(ctx, &redis.XAddArgs{Stream: r.stream, Values: values}).Err()
}

// addUntil is add that returns ctx's error as soon as ctx ends (untilDone):
// the demo's own records must not hold an interrupted demo for go-redis's
// timeouts when Redis stopped answering.
func (r *recorder) addUntil(ctx context.Context, kind string, kv ...string) error {
	_, err := untilDone(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.add(ctx, kind, kv...)
	})
	return err
}

// parseRecord turns a stream message into a record.
func parseRecord(seq int, m redis.XMessage) record {
	rec := record{Seq: seq, Fields: map[string]string{}}
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			rec.At = time.UnixMilli(n)
		}
	}
	for k, v := range m.Values {
		s, _ := v.(string)
		switch k {
		case "k":
			rec.Kind = s
		case "w":
			rec.Worker = s
		default:
			rec.Fields[k] = s
		}
	}
	return rec
}
