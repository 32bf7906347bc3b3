package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// metadataFlag collects repeated --metadata k=v flags.
type metadataFlag map[string]string

// String returns the pairs as k=v,k=v sorted by key (flag.Value).
func (m metadataFlag) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

// Set adds one k=v pair (flag.Value).
func (m metadataFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	m[k] = val
	return nil
}

// keyspaceFlag registers --keyspace, the key prefix of the deployment.
func (fs *flagSet) keyspaceFlag() *string {
	return fs.String("keyspace", redisstreams.DefaultPrefix, "key `prefix` of the leasebus deployment (redisstreams Options.Prefix)")
}

func runPublish(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "publish", "publish TOPIC --type T [--data JSON] [--metadata k=v]... [flags]",
		`Publish one event to TOPIC and print its id once Redis stored it.
--data must be a JSON value; it is stored compacted. When Redis does not
answer within --timeout after the event was sent, the event may have been
stored: the error (exit 1) gives its id, to publish it again with --id (subscribers tell a retry by
Event.ID).`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	typ := fs.String("type", "", "event `type` (required)")
	data := fs.String("data", "", "payload, a `JSON` value such as '{\"n\":1}'")
	id := fs.String("id", "", "event `id` (default: a random UUID)")
	runID := fs.String("run-id", "", "optional correlation `id`")
	md := metadataFlag{}
	fs.Var(md, "metadata", "a header `key=value` (repeatable)")
	timeout := fs.timeoutFlag()
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := checkTimeout(*timeout); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want one TOPIC argument, got %d (see leasebus publish --help)", len(pos))
	}
	topic := pos[0]
	if topic == "" {
		return usageErrorf("TOPIC is empty (see leasebus publish --help)")
	}
	if *typ == "" {
		return usageErrorf("--type is required")
	}
	ev := pubsub.Event{ID: *id, Type: *typ, RunID: *runID}
	if *data != "" {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(*data)); err != nil {
			return usageErrorf("--data is not valid JSON: %v", err)
		}
		ev.Data = json.RawMessage(buf.Bytes())
	}
	if len(md) > 0 {
		ev.Metadata = md
	}
	ev, err = pubsub.PrepareEvent(ev)
	if err != nil {
		return usageErrorf("%v", err)
	}
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	_, err = bounded(ctx, *timeout, "", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.Publish(ctx, topic, ev)
	})
	if err != nil {
		var refused redis.Error
		if errors.As(err, &refused) {
			// The server answered with an error (a key of another type,
			// say): the event was not stored.
			return fmt.Errorf("publish %s to %q: %w", ev.ID, topic, err)
		}
		// The event was sent, or may have been, and the answer is missing:
		// it may be stored. Only a retry with the same id lets
		// subscribers (idempotent on Event.ID) tell it is the same event.
		return fmt.Errorf("publish to %q: %w; the event may have been stored: retry with --id %s", topic, err, ev.ID)
	}
	fmt.Fprintf(e.stdout, "published %s to %s\n", cell(ev.ID), cell(topic))
	return nil
}
