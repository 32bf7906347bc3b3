package redisstreams

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubReq is one queued XADD. The writer answers on done (buffered, so an
// abandoned caller does not block it).
type pubReq struct {
	key    string
	fields []string
	done   chan error
}

// publish queues one XADD of fields on the stream key and waits for its
// reply. Requests queued by concurrent callers are sent together in one
// pipeline by a writer; each caller gets its own command's result.
func (s *streamBus) publish(ctx context.Context, key string, fields []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.start()
	r := &pubReq{key: key, fields: fields, done: make(chan error, 1)}
	select {
	case s.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("redisstreams: publish to %q: %w (the event may have been stored)", key, ctx.Err())
	}
}

// writeLoop takes the first queued request, everything else already queued
// (up to BatchSize), sends them in one pipeline and answers each. After stopW
// closes it drains the queue before returning, so that no accepted request
// is left unanswered.
func (s *streamBus) writeLoop() {
	defer s.writersWG.Done()
	bs := s.b.opts.BatchSize
	batch := make([]*pubReq, 0, bs)
	for {
		select {
		case r := <-s.queue:
			batch = append(batch, r)
		case <-s.stopW:
			for {
				select {
				case r := <-s.queue:
					batch = append(batch, r)
					if len(batch) == bs {
						s.send(batch)
						batch = batch[:0]
					}
				default:
					if len(batch) > 0 {
						s.send(batch)
					}
					return
				}
			}
		}
	fill:
		for len(batch) < bs {
			select {
			case r := <-s.queue:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.send(batch)
		clear(batch)
		batch = batch[:0]
	}
}

// send writes batch in one pipeline: per request an XADD with MAXLEN ~ and,
// when StreamIdleTTL is set, a PEXPIRE of the stream.
func (s *streamBus) send(batch []*pubReq) {
	o := &s.b.opts
	maxLen := o.MaxLen
	if maxLen < 0 {
		maxLen = 0 // no trimming
	}
	// The writes are not tied to any caller's ctx: a caller that gives up
	// must not fail the others. go-redis timeouts bound the call.
	ctx := context.Background()
	pipe := s.b.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(batch))
	for i, r := range batch {
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: r.key,
			MaxLen: maxLen,
			Approx: true,
			Values: r.fields,
		})
		if o.StreamIdleTTL > 0 {
			pipe.PExpire(ctx, r.key, max(o.StreamIdleTTL, time.Millisecond))
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	for i, r := range batch {
		id, err := cmds[i].Result()
		if err != nil {
			r.done <- fmt.Errorf("redisstreams: xadd %q: %w", r.key, err)
			continue
		}
		s.wrote(r.key, id)
		r.done <- nil
	}
}
