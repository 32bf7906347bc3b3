package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/lifecycle"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// ErrInvalid is wrapped by errors about bad Options or a bad URL. Errors about
// bad arguments of the pubsub and lease methods wrap pubsub.ErrInvalid and
// lease.ErrInvalid instead, as those contracts say.
var ErrInvalid = errors.New("redisstreams: invalid argument")

// Defaults of Options.
const (
	DefaultPrefix       = keys.DefaultPrefix
	DefaultMaxLen       = 100_000
	DefaultMaxEventSize = 1 << 20
	DefaultBlockTime    = 2 * time.Second
	DefaultBatchSize    = 256
)

// Options configures a Backend. The zero value is valid; each field's default
// is the Default constant of the same name.
type Options struct {
	// Prefix starts every key ("leasebus"). It must not hold {}*?[]\.
	Prefix string
	// MaxLen trims each stream to about this many entries on publish
	// (XADD MAXLEN ~). Default DefaultMaxLen; -1 disables trimming.
	MaxLen int64
	// StreamIdleTTL, when positive, makes a stream expire after it has seen
	// no publish for that long (the expiry is pushed back on each publish).
	// Default 0: streams never expire.
	StreamIdleTTL time.Duration
	// MaxEventSize is the largest encoded event Publish accepts, in bytes;
	// larger events are rejected with an error wrapping pubsub.ErrInvalid.
	// Default DefaultMaxEventSize.
	MaxEventSize int
	// BlockTime is how long one blocking read waits before it is issued
	// again. Default DefaultBlockTime.
	BlockTime time.Duration
	// BatchSize is the COUNT of stream reads and the largest publish
	// pipeline. Default DefaultBatchSize.
	BatchSize int
	// Consumer names this process in consumer groups. Default: host name,
	// process id and a random suffix, unique per Backend.
	Consumer string
	// Logger receives the backend's warnings. Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	switch {
	case o.MaxLen == 0:
		o.MaxLen = DefaultMaxLen
	case o.MaxLen < -1:
		return fmt.Errorf("%w: MaxLen %d is below -1", ErrInvalid, o.MaxLen)
	}
	if o.StreamIdleTTL < 0 {
		return fmt.Errorf("%w: StreamIdleTTL %v is negative", ErrInvalid, o.StreamIdleTTL)
	}
	switch {
	case o.MaxEventSize == 0:
		o.MaxEventSize = DefaultMaxEventSize
	case o.MaxEventSize < 0:
		return fmt.Errorf("%w: MaxEventSize %d is negative", ErrInvalid, o.MaxEventSize)
	}
	switch {
	case o.BlockTime == 0:
		o.BlockTime = DefaultBlockTime
	case o.BlockTime < time.Millisecond:
		return fmt.Errorf("%w: BlockTime %v is below 1ms", ErrInvalid, o.BlockTime)
	}
	switch {
	case o.BatchSize == 0:
		o.BatchSize = DefaultBatchSize
	case o.BatchSize < 0:
		return fmt.Errorf("%w: BatchSize %d is negative", ErrInvalid, o.BatchSize)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Backend is a pubsub.PubSub and lease.Provider on Redis. It is safe for
// concurrent use. Create it with New or NewURL; Close it when done.
type Backend struct {
	client    redis.UniversalClient
	ownClient bool // NewURL made the client, so Close closes it
	opts      Options
	keys      keys.Space
	life      lifecycle.Closer

	bus streamBus // pubsub.go

	leaseQ combiner[*leaseCall] // lease.go: coalesces concurrent lease scripts
	hints  scriptHints          // lease.go: lease scripts seen cached
}

var (
	_ pubsub.PubSub      = (*Backend)(nil)
	_ lease.Provider     = (*Backend)(nil)
	_ lease.Inspector    = (*Backend)(nil)
	_ lease.BatchRenewer = (*Backend)(nil)
)

// New returns a Backend on client, which may be a *redis.Client,
// *redis.ClusterClient, a Sentinel failover client or a *redis.Ring. The
// Backend never closes client. It does not contact Redis; the first call does.
// Bad options return an error wrapping ErrInvalid.
func New(client redis.UniversalClient, o Options) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalid)
	}
	return newBackend(client, false, o)
}

// NewURL connects to the Redis at url (redis://, rediss:// or unix://, as
// redis.ParseURL reads it), checks it answers PING within ctx, and returns a
// Backend that owns the client (Close closes it). An unparsable url returns
// an error wrapping ErrInvalid; an unreachable server, the dial error, no
// later than ctx's deadline.
func NewURL(ctx context.Context, url string, o Options) (*Backend, error) {
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: url %q: %v", ErrInvalid, url, err)
	}
	client := redis.NewClient(ro)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redisstreams: connect %s: %w", ro.Addr, err)
	}
	b, err := newBackend(client, true, o)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return b, nil
}

func newBackend(client redis.UniversalClient, own bool, o Options) (*Backend, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	space, err := keys.NewSpace(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: Prefix: %v", ErrInvalid, err)
	}
	if o.Consumer == "" {
		o.Consumer = defaultConsumerName()
	}
	b := &Backend{client: client, ownClient: own, opts: o, keys: space}
	b.bus.init(b)
	return b, nil
}

// Client returns the Redis client the Backend uses.
func (b *Backend) Client() redis.UniversalClient { return b.client }

// Close waits for in-flight publishes, stops every subscription (waiting for
// running handlers to return and their acks to be written), and closes the
// client only when NewURL made it. It is Shutdown with a ctx that never ends:
// idempotent, safe to call concurrently, and every call returns once the
// shutdown is complete; later calls of other methods return ErrClosed.
func (b *Backend) Close() error { return b.Shutdown(context.Background()) }

// Shutdown closes the Backend as Close does, but waits only until ctx ends.
// From its first call on, every other method returns pubsub.ErrClosed or
// lease.ErrClosed. It waits for the Publish and Subscribe calls in progress,
// then stops every subscription: it cancels the ctx of running handlers and
// waits for them to return and for their acks to be written; entries a group
// subscription read and did not start are handed back to the group at once.
// Then it stops the readers, writes the remaining acks, and closes the client
// when NewURL made it. It returns nil when all that is done (a later call
// returns nil too), or the errors it met.
//
// When ctx ends first, Shutdown returns ctx.Err() at once and gives up on the
// handlers still running (ones that ignore their ctx): their deliveries are
// never acked, whatever the handlers return later, so a group entry stays
// pending and another member of the group receives it again after its
// AckDeadline (counted as a redelivery); the entries such a subscription read
// and did not start are not handed back at once but after their AckDeadline
// too. A fan-out delivery is simply dropped with its subscription. The rest
// of the shutdown does not wait for those handlers: the readers stop, the
// acks of the handlers that returned are written and an owned client is
// closed, in the background. A later Close or Shutdown waits for all of it,
// including the handlers given up on.
func (b *Backend) Shutdown(ctx context.Context) error {
	return b.life.Shutdown(ctx, func(abort <-chan struct{}) error {
		stragglers, err := b.bus.close(abort)
		if b.ownClient {
			err = errors.Join(err, b.client.Close())
		}
		<-stragglers
		return err
	})
}

// isClosed reports whether Close or Shutdown was called.
func (b *Backend) isClosed() bool { return b.life.Closed() }

// defaultConsumerName returns host-pid-random, unique per Backend.
func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
}
