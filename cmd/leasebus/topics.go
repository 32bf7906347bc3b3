package main

import (
	"context"
	"fmt"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/pubsub"
)

// runTopics runs "topics delete TOPIC".
func runTopics(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "topics", "topics delete TOPIC [flags]",
		`Delete TOPIC: its stream, with every event it keeps and every consumer
group (positions and unacked events). Subscriptions that are live go on with
the events published afterwards. The dead-letter topic TOPIC.dead is a topic
of its own and is left alone.

A TOPIC that has no stream under --keyspace (a typo, or the wrong keyspace)
is an error, exit 1, unless --missing-ok is given. When Redis has not
answered within --timeout the command fails (exit 1); the topic may have
been deleted.`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	missingOK := fs.Bool("missing-ok", false, "exit 0 when TOPIC does not exist (nothing is deleted)")
	timeout := fs.timeoutFlag()
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := checkTimeout(*timeout); err != nil {
		return err
	}
	if len(pos) == 0 || pos[0] != "delete" {
		return usageErrorf("want the subcommand delete (see leasebus topics --help)")
	}
	if len(pos) != 2 {
		return usageErrorf("want one TOPIC argument after delete, got %d (see leasebus topics --help)", len(pos)-1)
	}
	if pos[1] == "" {
		return usageErrorf("TOPIC is empty (see leasebus topics --help)")
	}
	topic := pos[1]
	if err := pubsub.ValidateTopic(topic); err != nil {
		return usageErrorf("%v", err)
	}
	space, err := keys.NewSpace(*keyspace)
	if err != nil {
		return usageErrorf("--keyspace %q: %v", *keyspace, err)
	}
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	// DeleteTopic returns nil for a topic that does not exist; an operator
	// who mistyped it must not read "deleted". A stream created between
	// this check and the deletion is deleted and reported as such.
	key := space.Stream(topic)
	deleted, err := bounded(ctx, *timeout, "", func(ctx context.Context) (bool, error) {
		n, err := b.Client().Exists(ctx, key).Result()
		if err != nil {
			return false, fmt.Errorf("look up %s: %w", key, err)
		}
		if n == 0 {
			return false, nil
		}
		var d pubsub.TopicDeleter = b
		return true, d.DeleteTopic(ctx, topic)
	})
	switch {
	case err != nil:
		return fmt.Errorf("delete topic %q: %w", topic, err)
	case deleted:
		fmt.Fprintf(e.stdout, "deleted topic %s\n", topic)
		return nil
	case *missingOK:
		fmt.Fprintf(e.stdout, "no topic %s under keyspace %s: nothing deleted\n", topic, *keyspace)
		return nil
	default:
		return fmt.Errorf("no topic %s under keyspace %s (no stream at %s): nothing deleted; --missing-ok makes this exit 0", topic, *keyspace, key)
	}
}
