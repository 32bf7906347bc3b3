package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/lifecycle"
	"github.com/leasebus/leasebus/internal/redisurl"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// ErrInvalid is wrapped by errors about bad Options or a bad URL. Errors about
// bad arguments of the pubsub and lease methods wrap pubsub.ErrInvalid and
// lease.ErrInvalid instead, as those contracts say.
var ErrInvalid = errors.New("redisstreams: invalid argument")

// ErrNotReplicated is wrapped by the error of a publish (Publish,
// PublishFor, PublishBatch) made with Options.PublishSyncReplicas set whose
// event Redis stored on the master but fewer than PublishSyncReplicas
// replicas acknowledged within Options.PublishSyncTimeout (or whose WAIT
// failed; the error then wraps the cause too). The event IS stored on the
// master and may be delivered; it may also be lost, if the master fails
// before the event reaches a replica that is then promoted. A retry may
// then deliver it twice: set Event.ID before the first attempt (Publish
// assigns one to its own copy when it is empty) and keep it for the
// retries, so that handlers can deduplicate on it.
var ErrNotReplicated = errors.New("redisstreams: event stored on the master but not acknowledged by the replicas asked for")

// Defaults of Options.
const (
	DefaultPrefix = keys.DefaultPrefix
	// DefaultRetention is Options.Retention's default, the same as every
	// leasebus backend's: pubsub.DefaultRetention (100,000 events).
	DefaultRetention = pubsub.DefaultRetention
	// DefaultMaxLen is DefaultRetention, under the name of the deprecated
	// Options.MaxLen.
	DefaultMaxLen       = DefaultRetention
	DefaultMaxEventSize = 1 << 20
	DefaultBlockTime    = 2 * time.Second
	DefaultBatchSize    = 256
	// DefaultFenceIdle is Options.FenceIdle's default.
	DefaultFenceIdle = time.Hour
	// DefaultLeaseSyncTimeout is Options.LeaseSyncTimeout's default.
	DefaultLeaseSyncTimeout = time.Second
	// DefaultPublishSyncTimeout is Options.PublishSyncTimeout's default.
	DefaultPublishSyncTimeout = time.Second

	// MaxBlockTime is the longest BlockTime: longer blocks gain nothing and
	// approach the limits of the client's deadline arithmetic.
	MaxBlockTime = time.Hour
	// MaxBatchSize is the largest BatchSize: each group subscription
	// allocates read-ahead slots of that size.
	MaxBatchSize = 1 << 16
)

// Options configures a Backend. The zero value is valid; each field's default
// is the Default constant of the same name.
type Options struct {
	// Prefix starts every key ("leasebus"). It must not hold {}*?[]\.
	Prefix string
	// Retention is how many of each topic's newest entries the stream keeps
	// at least, for StartFrom(Earliest) to replay (see "Retention" in
	// package pubsub). Entries a consumer group has not acked (delivered and
	// pending, or not delivered yet) are kept whatever it says: a trim
	// (trim.lua, run by about one publish in min(max(Retention/4, 1), 256),
	// in the same round trip as its XADD) removes only entries older than
	// the newest Retention that every group of the stream has acked. Fan-out
	// subscriptions are not counted: one that falls more than Retention
	// entries behind may miss the oldest. Default DefaultRetention;
	// pubsub.RetainAll (-1) never trims; otherwise it must be positive.
	Retention int
	// MaxLen is the former name of Retention, read only when Retention is
	// zero.
	//
	// Deprecated: use Retention. MaxLen no longer trims with XADD MAXLEN ~
	// (which removed entries groups had not acked); it means Retention.
	MaxLen int64
	// StreamIdleTTL, when positive, makes a stream expire after it has seen
	// no publish for that long (the expiry is pushed back on each publish).
	// The whole stream goes, with its groups and their unacked entries: it
	// is not a trim and does not respect Retention. A new consumer group
	// on a stream with one group and nothing pending, and a read of a
	// pubsub.ExpireWhenDrained subscription that returns entries from a
	// stream with an expiry, push it back too. Give every Backend that
	// publishes to or reads a stream the same StreamIdleTTL: a PublishFor,
	// such a new group or such a read through a Backend without it removes
	// the stream's expiry (each takes back what may be a drained expiry,
	// pubsub.ExpireWhenDrained, and cannot tell it from an idle one), and
	// the stream is then kept until a publish through a Backend with it
	// (review h64; taking back less would risk deleting a drained expiry's
	// stream with entries in it). At least 1ms. Default 0: streams never
	// expire.
	StreamIdleTTL time.Duration
	// MaxEventSize is the largest encoded event Publish accepts, in bytes;
	// larger events are rejected with an error wrapping pubsub.ErrInvalid.
	// Default DefaultMaxEventSize. Publishes are batched by count, not by
	// size, one batch in flight at a time: small events queued behind big
	// ones wait for them. Review h59 saw the slowest of 6,400 small
	// Publishes take 7.0s beside 8 events of 48 MiB (this raised to 64 MiB),
	// and 6.3-6.9s beside 512 events of about 1 MiB (the default), on a
	// NewURL client with all delivered and none failed; put big payloads
	// elsewhere (an object store) and publish a reference when latency
	// matters.
	MaxEventSize int
	// BlockTime is how long the Backend's shared blocking read (XREAD)
	// waits before it is issued again (on Cluster, by a reader that
	// serves a single hash slot; one that serves several polls them every
	// 50ms at most, see Backend.Subscribe), and how long a group subscription
	// (other than a pubsub.ReadOnDemand one) waits for the shared reader's
	// bell before it reads again anyway (one pipelined XREVRANGE and
	// XREADGROUP per idle subscription per BlockTime), within [1ms,
	// MaxBlockTime]. Default DefaultBlockTime.
	BlockTime time.Duration
	// BatchSize is the COUNT of stream reads and the largest publish
	// pipeline, at most MaxBatchSize. Default DefaultBatchSize. A group
	// subscription's read also stops once it returned about 1 MiB of
	// entries (an entry bigger than that is read alone): its script holds
	// the server while it runs, and one read of 256 entries of 1 MiB held
	// it for 13.4s, every client of the server waiting and its calls
	// failing past go-redis's ReadTimeout (review h72,
	// TestReviewH72BigEventBacklogBlocksServer: the slowest PING now
	// 0.16s). Its first XREADGROUP reads as many as the biggest entry of
	// the previous read fit in that budget, so small entries still take
	// one call (BENCHMARKS.md, "Twenty-eighth pass": BenchmarkEndToEnd16
	// and BenchmarkSignalsThroughput show no cost).
	BatchSize int
	// Consumer names this process in consumer groups. The Backend appends a
	// random suffix of its own and a number per group subscription
	// ("<Consumer>-<8 hex digits>-<n>"), so two Backends given the same
	// Consumer (two processes started with one configuration) never share a
	// consumer: neither can take, hand back or delete the other's pending
	// entries. Default: host name and process id.
	Consumer string
	// Logger receives the backend's warnings. Default slog.Default().
	Logger *slog.Logger
	// FenceIdle is how long a lease key's fencing counter outlives the
	// lease: a key with no lease for that long leaves no key behind. The
	// next tenure's token is then taken from the server's clock (in
	// microseconds), which is above every earlier token of the key unless
	// the server's clock went back by more than FenceIdle. Default
	// DefaultFenceIdle; at least 1s.
	FenceIdle time.Duration
	// LeaseStatusWindow is how long after a lease ended its status
	// (released, expired, revoked) can still be read with LeaseState; the
	// lease's state record and revoked mark are gone after it. Default
	// lease.StatusWindow; at least 1s.
	LeaseStatusWindow time.Duration
	// LeaseSyncReplicas, when positive, makes AcquireLease and
	// TransferLease report a win only once the lease and its fencing
	// counter reached at least that many replicas (the script and WAIT sent
	// on one connection of the key's master); when fewer acknowledge within
	// LeaseSyncTimeout they return an error instead — never a win — and the
	// lease stays on the master until its TTL ends. It protects fencing
	// across a failover: a replica promoted after the master died holds
	// every token a caller was told it won, so no token is handed out twice,
	// provided the promoted replica is one that acknowledged: set it to the
	// number of replicas for a guarantee (with fewer, it holds only as long
	// as Sentinel or Cluster promotes a replica that acknowledged, which
	// they prefer but do not promise). It also refuses wins from a master
	// that has no replica: an old master restarted empty and answering
	// before Sentinel demotes it. Renewals (RenewLease, RenewLeases, and so
	// the signals runtime's and lease.Keeper's) count only once replicated
	// too: a renewal the replicas did not acknowledge in time returns an
	// error (RenewLeases: that request's entry in its *lease.BatchError),
	// so its holder's deadline is not moved past what a promoted replica
	// holds, and a holder that fails closed at its deadline has stopped
	// before the lease can end there (TestLeaseSyncRenewals). While fewer
	// replicas are connected than it asks (after a failover, until the old
	// master rejoins), every acquire and transfer fails, and every renewal,
	// so held leases are lost at their deadlines. It costs one more round
	// trip's worth of waiting for the replica on every acquire, transfer
	// and renewal pipeline; acquires, transfers and RenewLease calls are no
	// longer coalesced with other lease calls (BENCHMARKS.md). On a Cluster
	// the synced calls go to the key's master's own client, which does not
	// follow MOVED; an ASK is followed (see PublishSyncReplicas), but while
	// a lease's slot migrates its acquires, transfers and renewals fail
	// anyway, with TRYAGAIN, synced or not: the lease scripts declare the
	// lease's revoked mark, which exists only after a revoke, and Redis
	// refuses a command of several keys in a migrating slot unless all of
	// them are on the node that gets it (TestSyncClusterFollowsAsk), so the
	// slot's leases are lost at their deadlines (failing closed) if the
	// migration outlasts them. Once it has moved, the first MOVED reply
	// makes the Backend
	// reload the client's map of slots (go-redis alone would wait for
	// ClusterStateReloadInterval, 60s by default), and the next calls go
	// to the new master (TestSyncClusterFollowsSlotMove: a renewal retried
	// every 20ms succeeded 189ms after the move); so does a transport
	// error, as when the Cluster promoted the replica of a master that died
	// (TestReviewAASyncedClusterFollowsFailover: a renewal succeeded 1ms
	// after the promotion, where every call failed for the 15s the test
	// waited). Default 0: replication stays asynchronous. It needs a
	// *redis.Client (standalone or Sentinel) or a *redis.ClusterClient.
	LeaseSyncReplicas int
	// LeaseSyncAOF, when set, also makes acquire, transfer and renewals
	// wait until the master (and LeaseSyncReplicas replicas) wrote the
	// change to its append-only file (WAITAOF, Redis 7.2 or later; on an
	// older server every acquire, transfer and renewal returns the
	// server's error). Default false.
	LeaseSyncAOF bool
	// LeaseSyncTimeout bounds the wait of LeaseSyncReplicas and
	// LeaseSyncAOF. Default DefaultLeaseSyncTimeout.
	LeaseSyncTimeout time.Duration
	// PublishSyncReplicas, when positive, makes Publish, PublishFor and
	// PublishBatch (and the dead letters of subscriptions, which are
	// published the same way) return nil only once the event reached at
	// least that many replicas: the batch's writes and WAIT
	// PublishSyncReplicas are sent in one pipeline on one connection of the
	// master (on Cluster, one per master the batch writes to), so it adds no
	// round trip, only the wait for the replicas. When fewer acknowledge
	// within PublishSyncTimeout, or the WAIT fails, the publish returns an
	// error wrapping ErrNotReplicated: the event is stored on the master and
	// may be delivered, or lost in a failover; a retry may deliver it twice.
	// A group subscription's dead letter the replicas did not acknowledge
	// counts as stored on a *redis.Client (one master), rather than being
	// stored once more by every redelivery while a stall lasts
	// (TestReviewDeadLetterRepeatsDuringStall); the failed entry is then
	// acked at once, by a script that acks it only while that dead letter
	// is on the master, so a failover that loses the dead letter leaves
	// the entry pending, and it is dead-lettered again
	// (TestDeadLetterUnsyncedLostInFailover,
	// TestReviewAADeadLetterAckAfterFailover: an ack sent through the usual
	// batches after the master died reached the promoted master, which had
	// the entry but not the dead letter). A fan-out subscription's (no ack
	// to lose with it) and, on a Cluster, where the dead-letter topic may
	// live on another master, any subscription's counts as failed: the
	// event is redelivered, and each redelivery during a stall may store a
	// copy (TestReviewAADeadLetterFanOutLostInFailover).
	// A group subscription's reads end with the same WAIT, and what a read
	// the replicas did not acknowledge delivered is not handed on until a
	// later read's WAIT covers it (the read counts as one whose reply was
	// lost), so a failover cannot make a handed-on event look undelivered
	// and give it again as a first delivery (DeliveryAttempt 1):
	// TestPublishSyncReadWaits. A claim of another member's entries
	// (ClaimPending, the takeover of a stale or silent member's) ends with
	// the same WAIT, and what a claim the replicas did not acknowledge took
	// is not handed on either: the claim is undone (the entries go back to
	// their earlier consumer, idle time and delivery count), and the
	// ClaimPending pass retries, a stale pass tries again at its next
	// interval. So an
	// entry an unacknowledged read delivered and another member claimed in
	// the same stall does not come again as a first delivery after a
	// failover (TestPublishSyncClaimWaits,
	// TestPublishSyncClaimOfUnsyncedRead). The claims that only count a
	// redelivery of an entry this member already has (a nacked entry's
	// retry) are not waited for: a failover can undo that count, never the
	// first delivery's.
	// It protects accepted events across a failover: a replica promoted
	// after the master died (or after a spurious second failover deposed a
	// master that had taken writes) holds every event a caller was told was
	// stored, provided the promoted replica is one that acknowledged: set it
	// to the number of replicas for a guarantee (with fewer, it holds only
	// as long as Sentinel or Cluster promotes a replica that acknowledged,
	// which they prefer but do not promise). It also refuses publishes to a
	// master that has no replica, such as an old master restarted empty and
	// answering before Sentinel demotes it. While fewer replicas are
	// connected than it asks (after a failover, until the old master rejoins
	// as a replica), every publish fails, after PublishSyncTimeout. Each
	// batch of coalesced publishes waits for the replicas' acknowledgement
	// (one batch is in flight at a time), which lowers throughput
	// (BENCHMARKS.md). On Cluster the per-master pipelines do not follow
	// MOVED, but they follow ASK: while a slot migrates (a resharding, such
	// as redis-cli --cluster reshard, slow on a big slot or left
	// unfinished), the commands the source answers ASK for (their key moved
	// already, or is new) are sent again to the migration's target, each
	// after ASKING, in one pipeline with the same WAIT, which then counts
	// the target's replicas; a call whose writes went to both masters
	// succeeds only once both WAITs counted enough. A command answered ASK
	// never ran on the source, so none runs twice
	// (TestSyncClusterFollowsAsk: publishes, a batch spanning keys moved
	// and not, a group subscription's reads and a claim succeed while the
	// migration is unfinished; with the target's replica paused a publish
	// fails with ErrNotReplicated). A group read whose stream and read
	// guard are on different nodes (between two MIGRATE batches) fails
	// with TRYAGAIN and is tried again later. The target must be a master
	// in the client's map of slots: a node that owns no slot yet (one
	// added for the resharding) is not, and calls for keys already moved to
	// it fail, saying so, until its first slot has moved. Once the slot
	// has moved, the first MOVED
	// reply makes the Backend reload the client's map of slots, so a retry
	// reaches the new master (TestSyncClusterFollowsSlotMove: 22ms after
	// the move; before, such publishes failed until go-redis reloaded the
	// map on its own, every 60s by default); a transport error does the
	// same, for the promotion of a dead master's replica
	// (TestReviewAASyncedClusterFollowsFailover: a publish succeeded 831ms
	// after it). PublishSyncTimeout must be below the client's
	// ReadTimeout (5s by default in go-redis v9.23; New returns an error
	// wrapping ErrInvalid otherwise): a WAIT that timed out would read as a
	// dead connection, and go-redis would send the publishes again. Default
	// 0: replication stays asynchronous. It needs a *redis.Client
	// (standalone or Sentinel) or a *redis.ClusterClient that reads from
	// masters (not ReadOnly, RouteByLatency or RouteRandomly).
	PublishSyncReplicas int
	// PublishSyncTimeout bounds the wait of PublishSyncReplicas (WAIT's
	// timeout, in whole milliseconds). Default DefaultPublishSyncTimeout;
	// at least 1ms, and below the client's ReadTimeout.
	PublishSyncTimeout time.Duration
	// ConfigureClient, when set, is called by NewURL with the client
	// options parsed from the URL, before the client is built, to set what
	// a URL cannot express (TLS config, dialer, hooks, pool settings). NewURL
	// has already set ContextTimeoutEnabled; turning it off makes lease and
	// publish calls ignore ctx deadlines (leases still fail closed, see
	// New). New ignores it.
	ConfigureClient func(*redis.Options)
}

func (o *Options) setDefaults() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Retention == 0 && o.MaxLen != 0 {
		if o.MaxLen < -1 || o.MaxLen > math.MaxInt32 {
			return fmt.Errorf("%w: MaxLen %d is below -1 or above %d (use Retention)", ErrInvalid, o.MaxLen, math.MaxInt32)
		}
		o.Retention = int(o.MaxLen)
	}
	switch {
	case o.Retention == 0:
		o.Retention = DefaultRetention
	case o.Retention < pubsub.RetainAll:
		return fmt.Errorf("%w: Retention %d is below -1 (pubsub.RetainAll)", ErrInvalid, o.Retention)
	}
	o.MaxLen = int64(o.Retention)
	switch {
	case o.StreamIdleTTL < 0:
		return fmt.Errorf("%w: StreamIdleTTL %v is negative", ErrInvalid, o.StreamIdleTTL)
	case o.StreamIdleTTL > 0 && o.StreamIdleTTL < time.Millisecond:
		return fmt.Errorf("%w: StreamIdleTTL %v is below 1ms", ErrInvalid, o.StreamIdleTTL)
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
	case o.BlockTime > MaxBlockTime:
		return fmt.Errorf("%w: BlockTime %v is above %v (MaxBlockTime)", ErrInvalid, o.BlockTime, MaxBlockTime)
	}
	switch {
	case o.BatchSize == 0:
		o.BatchSize = DefaultBatchSize
	case o.BatchSize < 0:
		return fmt.Errorf("%w: BatchSize %d is negative", ErrInvalid, o.BatchSize)
	case o.BatchSize > MaxBatchSize:
		return fmt.Errorf("%w: BatchSize %d is above %d (MaxBatchSize)", ErrInvalid, o.BatchSize, MaxBatchSize)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.FenceIdle == 0:
		o.FenceIdle = DefaultFenceIdle
	case o.FenceIdle < time.Second:
		return fmt.Errorf("%w: FenceIdle %v is below 1s", ErrInvalid, o.FenceIdle)
	}
	switch {
	case o.LeaseStatusWindow == 0:
		o.LeaseStatusWindow = lease.StatusWindow
	case o.LeaseStatusWindow < time.Second:
		return fmt.Errorf("%w: LeaseStatusWindow %v is below 1s", ErrInvalid, o.LeaseStatusWindow)
	}
	switch {
	case o.LeaseSyncReplicas < 0:
		return fmt.Errorf("%w: LeaseSyncReplicas %d is negative", ErrInvalid, o.LeaseSyncReplicas)
	case o.LeaseSyncTimeout < 0:
		return fmt.Errorf("%w: LeaseSyncTimeout %v is negative", ErrInvalid, o.LeaseSyncTimeout)
	case o.LeaseSyncTimeout == 0:
		o.LeaseSyncTimeout = DefaultLeaseSyncTimeout
	case o.LeaseSyncTimeout < time.Millisecond:
		return fmt.Errorf("%w: LeaseSyncTimeout %v is below 1ms", ErrInvalid, o.LeaseSyncTimeout)
	}
	switch {
	case o.PublishSyncReplicas < 0:
		return fmt.Errorf("%w: PublishSyncReplicas %d is negative", ErrInvalid, o.PublishSyncReplicas)
	case o.PublishSyncTimeout < 0:
		return fmt.Errorf("%w: PublishSyncTimeout %v is negative", ErrInvalid, o.PublishSyncTimeout)
	case o.PublishSyncTimeout == 0:
		o.PublishSyncTimeout = DefaultPublishSyncTimeout
	case o.PublishSyncTimeout < time.Millisecond:
		// WAIT's timeout is in milliseconds, and 0 means forever.
		return fmt.Errorf("%w: PublishSyncTimeout %v is below 1ms", ErrInvalid, o.PublishSyncTimeout)
	}
	return nil
}

// leaseSync reports whether acquire and transfer wait for replicas or the
// AOF.
func (o *Options) leaseSync() bool { return o.LeaseSyncReplicas > 0 || o.LeaseSyncAOF }

// Backend is a pubsub.PubSub and lease.Provider on Redis. It is safe for
// concurrent use. Create it with New or NewURL; Close it when done.
type Backend struct {
	client    redis.UniversalClient
	ownClient bool // NewURL made the client, so Close closes it
	opts      Options
	keys      keys.Space
	life      lifecycle.Closer
	// consumer prefixes the consumer names of this Backend's group
	// subscriptions: Options.Consumer and a random suffix of its own;
	// subSeq numbers the subscriptions.
	consumer string
	subSeq   atomic.Uint64

	bus streamBus // pubsub.go

	leaseQ lanes[*leaseCall] // lease.go: coalesces concurrent lease scripts
	slots  slotMap           // slotmap.go: the first calls on a Cluster client wait for its map of slots
	// late counts the sends that go on after their call returned at its
	// ctx's end (awaitSend): Shutdown waits for them.
	late  lateGroup
	hints scriptHints // lease.go: lease scripts seen cached
}

var (
	_ pubsub.PubSub       = (*Backend)(nil)
	_ pubsub.TopicDeleter = (*Backend)(nil)
	_ lease.Provider      = (*Backend)(nil)
	_ lease.Inspector     = (*Backend)(nil)
	_ lease.BatchRenewer  = (*Backend)(nil)
)

// New returns a Backend on client, which may be a *redis.Client,
// *redis.ClusterClient, a Sentinel failover client or a *redis.Ring. The
// Backend never closes client. It does not contact Redis; the first call does.
// Bad options return an error wrapping ErrInvalid.
//
// What New needs from client: that it honours ctx deadlines
// (ContextTimeoutEnabled in go-redis's options, which NewURL sets). With a
// client that ignores them, leases still fail closed — a lease.Held ends at
// its own loss deadline whatever its renew calls do, and RenewLeases
// returns when its ctx ends — but a single lease call, a publish or a read
// may then block until the client's ReadTimeout (5s by default) on a network
// that stops answering. New logs a warning for such a *redis.Client or
// *redis.ClusterClient. New does not check the server's eviction policy;
// call Backend.CheckEviction for that.
func New(client redis.UniversalClient, o Options) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalid)
	}
	b, err := newBackend(client, false, o)
	if err != nil {
		return nil, err
	}
	if !honoursDeadlines(client) {
		b.opts.Logger.Warn("redisstreams: the Redis client ignores ctx deadlines (ContextTimeoutEnabled is off): leases still fail closed, but calls may block until the client's ReadTimeout when Redis stops answering")
	}
	return b, nil
}

// honoursDeadlines reports false only for a client whose options say it
// ignores ctx deadlines.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// NewURL connects to the Redis at url (redis://, rediss:// or unix://, as
// redis.ParseURL reads it), checks it answers PING within ctx, and returns a
// Backend that owns the client (Close closes it). It also reads the server's
// maxmemory-policy (Backend.CheckEviction) and logs a warning naming the
// policy when it is not noeviction; a server where CONFIG is disabled is
// tolerated (a debug line). The client honours ctx
// deadlines (ContextTimeoutEnabled), which redis.ParseURL cannot set;
// Options.ConfigureClient may adjust the rest. An unparsable url, or one
// naming a negative database (go-redis would quietly use database 0), returns
// an error wrapping ErrInvalid; an unreachable server, the dial error, no
// later than ctx's deadline. The url of a Redis Cluster node returns an
// error wrapping ErrInvalid: a client of one node sees only that node's
// share of the keys (a listing of leases would quietly miss the others);
// a Cluster needs New with a *redis.ClusterClient
// (TestNewURLRefusesClusterNode). So does the url of a Redis Sentinel, which
// holds no data (TestReviewH74NewURLRefusesSentinel).
func NewURL(ctx context.Context, url string, o Options) (*Backend, error) {
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: url %q: %s", ErrInvalid, redisurl.Redact(url), redisurl.RedactIn(err.Error(), url))
	}
	if ro.DB < 0 {
		// go-redis selects only a database above 0: it would quietly use 0.
		return nil, fmt.Errorf("%w: url %q: database %d is negative", ErrInvalid, redisurl.Redact(url), ro.DB)
	}
	ro.ContextTimeoutEnabled = true
	if o.ConfigureClient != nil {
		o.ConfigureClient(ro)
	}
	client := redis.NewClient(ro)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redisstreams: connect %s: %w", ro.Addr, err)
	}
	if isClusterNode(ctx, client) {
		_ = client.Close()
		return nil, fmt.Errorf("%w: url %q: %s is a node of a Redis Cluster, and NewURL connects to one server (it would see that node's share of the keys): use New with a *redis.ClusterClient", ErrInvalid, redisurl.Redact(url), ro.Addr)
	}
	if isSentinel(ctx, client) {
		_ = client.Close()
		return nil, fmt.Errorf("%w: url %q: %s is a Redis Sentinel, which holds no data, and NewURL connects to a data server: give the master's URL (SENTINEL GET-MASTER-ADDR-BY-NAME <name> on the Sentinel names it), or use New with a client from redis.NewFailoverClient", ErrInvalid, redisurl.Redact(url), ro.Addr)
	}
	b, err := newBackend(client, true, o)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	b.warnEviction(ctx)
	return b, nil
}

// isSentinel reports whether the server client talks to is a Redis Sentinel
// (INFO server says redis_mode:sentinel). A server that does not answer INFO
// counts as not one.
func isSentinel(ctx context.Context, client *redis.Client) bool {
	info, err := client.Info(ctx, "server").Result()
	return err == nil && strings.Contains(info, "redis_mode:sentinel")
}

// isClusterNode reports whether the server client talks to has cluster
// mode on (INFO cluster says cluster_enabled:1). A server that does not
// answer INFO (renamed or denied by an ACL; miniredis) counts as not one.
func isClusterNode(ctx context.Context, client *redis.Client) bool {
	info, err := client.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
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
	if o.leaseSync() {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: LeaseSyncReplicas/LeaseSyncAOF need a *redis.Client or *redis.ClusterClient, not %T", ErrInvalid, client)
		}
	}
	if o.PublishSyncReplicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: PublishSyncReplicas %d needs a *redis.Client or *redis.ClusterClient, not %T", ErrInvalid, o.PublishSyncReplicas, client)
		}
		// Reads routed to replicas (XPENDING, a lost read's XRANGE) could
		// answer from one that lags behind what the master acknowledged:
		// an entry missing there would be taken for deleted and acked.
		if cc, ok := client.(*redis.ClusterClient); ok {
			if co := cc.Options(); co.ReadOnly || co.RouteByLatency || co.RouteRandomly {
				return nil, fmt.Errorf("%w: PublishSyncReplicas %d needs a ClusterClient that reads from masters, not one with ReadOnly %v, RouteByLatency %v, RouteRandomly %v",
					ErrInvalid, o.PublishSyncReplicas, co.ReadOnly, co.RouteByLatency, co.RouteRandomly)
			}
		}
		// A WAIT still waiting at the read deadline reads as a dead
		// connection, and go-redis sends the whole pipeline again: every
		// event of the batch stored once more per retry.
		if rt := readTimeout(client); rt > 0 && o.PublishSyncTimeout >= rt {
			return nil, fmt.Errorf("%w: PublishSyncTimeout %v is not below the client's ReadTimeout %v (a WAIT that times out would read as a dead connection, and go-redis would send the publishes again)",
				ErrInvalid, o.PublishSyncTimeout, rt)
		}
	}
	b := &Backend{client: client, ownClient: own, opts: o, keys: space,
		consumer: o.Consumer + "-" + uuid.NewString()[:8]}
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
// lease.ErrClosed. It waits for the Publish and Subscribe calls in progress
// (on a server that stopped answering, Publish calls on a ctx that cannot
// end take up to about two batches' timeouts and retries, 35s and more with
// go-redis's defaults on a busy client: see Publish),
// then stops every subscription: it cancels the ctx of running handlers and
// waits for them to return and for their acks to be written; entries a group
// subscription read and did not start are handed back to the group at once.
// Then it stops the readers, writes the remaining acks, and closes the client
// when NewURL made it. Last it waits for the sends that calls left behind
// when they returned at their ctx's end (lease calls, publishes, Subscribe
// setups and Flush's checks that were waiting for a server that stopped
// answering: see "Clients and deadlines" in the package doc): with a client
// NewURL made they end as it closes, with the caller's client when it
// answers or gives up (its timeouts). It returns nil when all that is done
// (a later call returns nil too), or the errors it met.
//
// When Redis stops answering, each subscription's clean-up gives up after
// 10s and the remaining acks after 10s more: their entries stay pending
// and are redelivered after their AckDeadline, and Shutdown returns the
// errors it met (TestCloseOnBlackHoleWithAckQueued: Close on a black-holed
// NewURL client returned after 20.1s; with 100 group and 20 fan-out
// subscriptions, each with an ack queued, review h56 measured 25.1s). On a client that ignores ctx
// deadlines (ContextTimeoutEnabled off, go-redis's default) a call in
// flight may add its ReadTimeout and retries to those steps: review h53
// measured 25.1s on a SIGSTOPped server with redis.NewClient's defaults.
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
		b.late.wait()
		b.leaseQ.wait() // batches of lease scripts whose callers gave up waiting
		<-stragglers
		return err
	})
}

// isClosed reports whether Close or Shutdown was called.
func (b *Backend) isClosed() bool { return b.life.Closed() }

// readTimeout returns the ReadTimeout of a *redis.Client or
// *redis.ClusterClient (which its pipelines use, whatever the commands in
// them), or 0.
func readTimeout(client redis.UniversalClient) time.Duration {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout
	case *redis.ClusterClient:
		return c.Options().ReadTimeout
	}
	return 0
}

// defaultConsumerName returns host-pid (the Backend adds a random suffix).
func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
