package main

import (
	"context"
	"fmt"

	"github.com/leasebus/leasebus/pubsub"
)

// runTopics runs "topics delete TOPIC".
func runTopics(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "topics", "topics delete TOPIC [flags]",
		`Delete TOPIC: its stream, with every event it keeps and every consumer
group (positions and unacked events). Subscriptions that are live go on with
the events published afterwards. The dead-letter topic TOPIC.dead is a topic
of its own and is left alone.`)
	redisFlag := fs.redisFlag()
	keyspace := fs.keyspaceFlag()
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || pos[0] != "delete" {
		return usageErrorf("want the subcommand delete (see leasebus topics --help)")
	}
	if len(pos) != 2 || pos[1] == "" {
		return usageErrorf("want one TOPIC argument after delete, got %d (see leasebus topics --help)", len(pos)-1)
	}
	topic := pos[1]
	b, err := fs.backend(ctx, redisFlag, *keyspace, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	var d pubsub.TopicDeleter = b
	if err := d.DeleteTopic(ctx, topic); err != nil {
		return fmt.Errorf("delete topic %q: %w", topic, err)
	}
	fmt.Fprintf(e.stdout, "deleted topic %s\n", topic)
	return nil
}
