package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// tailTimeFormat is the time column of tail.
const tailTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func runTail(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "tail",
		"tail TOPIC [--group G [--create-group]] [--from earliest|latest] [flags]",
		`Print the events of TOPIC as they arrive, one line each:
time, id, type, data (then run=, attempt= and metadata when set), until
interrupted (Ctrl-C) or --count events were printed.
Without --group every event is printed (fan-out, nothing is acked for
others); with --group the command is one member of that consumer group and
acks what it prints. With --group and --count, the events it was handed
beyond --count are not printed and not acked: they go back to the group as
the command exits, at once (not after the group's ack deadline), so another
member or the next tail --group gets them (marked attempt=2: the group
counts each as delivered once). When Redis does not confirm the acks of the
events printed with --group as the command exits, it exits 1: they may be
delivered again.
--group joins a group that exists; a group that does not (a typo, a one-off
look) is refused, exit 1, unless --create-group: a group stays after the
command, and holds back the trimming of the topic's stream until it has
acked what it was handed and caught up, or the topic is deleted.`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	group := fs.String("group", "", "consume as a member of this consumer `group` (default: fan-out)")
	from := fs.String("from", "latest", "where a new subscription starts: `earliest` or latest")
	count := fs.Int("count", 0, "exit after this many events (default 0: until interrupted)")
	create := fs.Bool("create-group", false, "create --group when the topic has no such group (it stays after the command)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want one TOPIC argument, got %d (see leasebus tail --help)", len(pos))
	}
	topic := pos[0]
	if topic == "" {
		return usageErrorf("TOPIC is empty (see leasebus tail --help)")
	}
	var start pubsub.Position
	switch strings.ToLower(*from) {
	case "latest":
		start = pubsub.Latest
	case "earliest":
		start = pubsub.Earliest
	default:
		return usageErrorf("--from must be earliest or latest, got %q", *from)
	}
	if *count < 0 {
		return usageErrorf("--count %d is negative", *count)
	}
	if *create && *group == "" {
		return usageErrorf("--create-group needs --group")
	}
	opts := []pubsub.SubscribeOption{pubsub.StartFrom(start)}
	if *group != "" {
		opts = append(opts, pubsub.Group(*group))
	}
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	if *group != "" {
		groups, err := bounded(ctx, defaultTimeout, "read the groups of "+strconv.Quote(topic), func(ctx context.Context) ([]string, error) {
			return topicGroups(ctx, b, *keyspace, topic)
		})
		if err != nil {
			return err
		}
		switch {
		case slices.Contains(groups, *group):
		case !*create:
			have := "none"
			if len(groups) > 0 {
				have = strings.Join(groups, ", ")
			}
			return fmt.Errorf("topic %q has no group %q (its groups: %s): pass --create-group to create it; it then stays, and holds back the trimming of the topic until it catches up or the topic is deleted",
				topic, *group, have)
		default:
			fmt.Fprintf(e.stderr, "creating group %s on %s: it stays after this command, and holds back the trimming of the topic until it catches up or the topic is deleted (leasebus topics delete)\n", *group, topic)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		printed int
	)
	h := func(hctx context.Context, ev pubsub.Event) error {
		mu.Lock()
		over := *count > 0 && printed >= *count
		if !over {
			fmt.Fprintln(e.stdout, formatEvent(ev))
			printed++
			if *count > 0 && printed >= *count {
				cancel()
			}
		}
		mu.Unlock()
		if over {
			// Not ours to print: hold it until the subscription stops
			// (soon: --count was reached), which hands it back to the
			// group at once, as its next attempt. A nack now would bring
			// it back here after the redelivery delay, again and again
			// while the command exits, one more attempt each time.
			<-hctx.Done()
			return fmt.Errorf("tail: --count reached: %w", hctx.Err()) // leave it for another member
		}
		return nil
	}
	sub, err := b.Subscribe(ctx, topic, h, opts...)
	if err != nil {
		return fmt.Errorf("subscribe to %q: %w", topic, err)
	}
	mode := "fan-out"
	if *group != "" {
		mode = "group " + *group
	}
	fmt.Fprintf(e.stderr, "tailing %s (%s, from %s); Ctrl-C to stop\n", topic, mode, start)
	<-ctx.Done()
	uctx, ucancel := context.WithTimeout(context.Background(), unsubscribeGrace)
	defer ucancel()
	err = sub.Unsubscribe(uctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	mu.Lock()
	n := printed
	mu.Unlock()
	if err != nil && *group != "" && n > 0 {
		// Unsubscribe waits for the acks of what the handler returned:
		// Redis did not confirm them. Those not written stay pending and
		// go to another member after the group's ack deadline; an
		// operator who took them off the group must not read "done".
		return fmt.Errorf("Redis did not confirm the acks of the %s printed within %v: they may be delivered again to group %s (after its ack deadline)",
			plural(n, "event"), unsubscribeGrace, *group)
	}
	// Done (a group's events handed to us beyond --count went back to
	// the group), or Redis stopped answering: the process's exit ends the
	// subscription (a group's unacked entries go to another member after
	// their ack deadline).
	return nil
}

// topicGroups returns the names of the consumer groups of topic's stream
// (none when the topic has no stream).
func topicGroups(ctx context.Context, b *redisstreams.Backend, keyspace, topic string) ([]string, error) {
	space, err := keys.NewSpace(keyspace)
	if err != nil {
		return nil, err
	}
	infos, err := b.Client().XInfoGroups(ctx, space.Stream(topic)).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return nil, nil
		}
		return nil, fmt.Errorf("read the groups of %q: %w", topic, err)
	}
	names := make([]string, 0, len(infos))
	for _, in := range infos {
		names = append(names, in.Name)
	}
	return names, nil
}

// formatEvent returns the one-line form of ev that tail prints.
func formatEvent(ev pubsub.Event) string {
	data := "-"
	if len(ev.Data) > 0 {
		data = oneLine(string(ev.Data))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s  %s  %s", ev.CreatedAt.Format(tailTimeFormat), cell(ev.ID), cell(ev.Type), data)
	if ev.RunID != "" {
		fmt.Fprintf(&b, "  run=%s", cell(ev.RunID))
	}
	if ev.DeliveryAttempt > 1 {
		fmt.Fprintf(&b, "  attempt=%d", ev.DeliveryAttempt)
	}
	if len(ev.Metadata) > 0 {
		md := make(metadataFlag, len(ev.Metadata))
		for k, v := range ev.Metadata {
			md[cell(k)] = cell(v)
		}
		b.WriteString("  ")
		b.WriteString(md.String())
	}
	return b.String()
}

// cell returns s for a column of tail's line or of a listing's row: as it
// is, or quoted (Go syntax, "two\nlines") when it holds a control character
// such as a newline or a tab, so that every event or entry stays on one line
// and in its columns.
func cell(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strconv.Quote(s)
}
