// Package redisstreams is the Redis backend of leasebus: one [Backend] value
// implements pubsub.PubSub on Redis Streams and lease.Provider (with
// lease.Inspector and lease.BatchRenewer) on Lua scripts, for standalone,
// Sentinel and Cluster deployments.
//
// Every key one script or transaction touches shares one Cluster hash tag;
// user-given names are escaped so that no name can change another's slot.
// The caller owns a client passed to [New]; the Backend never closes it.
//
// # Durability
//
// Events, leases and fencing counters are as durable as the Redis deployment
// that holds them. Redis replicates asynchronously: after a Sentinel or
// Cluster failover, writes the old primary acknowledged but had not yet
// replicated are gone, and so are writes not yet on disk when a server
// restarts (with appendonly no, everything; with appendfsync everysec, up
// to about a second). A lost write can be a published event, a lease (which
// then looks free) or an increment of a fencing counter, so a later tenure
// can be given a token that was already handed out. Where fencing must hold
// across a failover, set [Options].LeaseSyncReplicas to the number of
// replicas: acquire and transfer then report a win only once WAIT saw every
// replica acknowledge the lease and its counter, and otherwise return an
// error (TestLeaseSyncFailover: no token handed out twice across a master
// kill; the cost is in BENCHMARKS.md); renewals count only once
// acknowledged too, so that a holder never believes in a deadline later
// than the one a promoted replica keeps (TestLeaseSyncRenewals). Where
// accepted events must survive a failover, set [Options].PublishSyncReplicas
// the same way: Publish, PublishFor and PublishBatch then return nil only
// once WAIT, sent in the same pipeline as the writes, counted that many
// replicas, and otherwise an error wrapping [ErrNotReplicated] (the event is
// on the master and may be delivered or lost; a retry may deliver it
// twice); a group subscription's reads and claims wait for the replicas
// too, so that a failover cannot make a delivered event look new
// (TestPublishSyncReadWaits, TestPublishSyncClaimWaits,
// TestPublishSyncClaimOfUnsyncedRead).
// While fewer replicas are connected than it asks, every publish and group
// read fails (TestPublishSyncReachesReplica: every accepted event was already on
// the replica when the call returned; TestPublishSyncReplicaStopped;
// TestPublishSyncFailover: every accepted event on the promoted master after
// a master kill that, without the option, lost the events the master alone
// had taken; TestPublishSyncClusterNoReplica; TestSyncClusterWithReplicas:
// on a Cluster each master's WAIT counts its own replicas, for publishes,
// acquires and renewals). Across restarts, run Redis with
// appendfsync always (or LeaseSyncAOF on Redis 7.2+). The tests restart a
// server with appendfsync always (TestLeaseRestartAppendOnly) and fail over
// a Sentinel deployment (TestSentinelFailoverResumes) to show what survives.
//
// When the server loses everything (a restart without persistence, FLUSHALL
// or FLUSHDB) the Backend goes on by itself; what was stored is gone:
// events published and not yet delivered, pending entries, leases, fencing
// counters, read guards. A group subscription finds its group gone
// (NOGROUP) and creates it again from 0, so it receives every event
// published after the loss; fan-out subscriptions go on with the new
// entries. Under publish load (TestReviewH75WipedServerUnderLoad: NewURL
// Backends, a group with two members and two fan-out subscriptions, 4
// publishers) every event published after the loss reached the group once
// and each fan-out subscription once, at most 57-125ms after its Publish
// began, with 1-2 warnings logged. A Flush waiting for this Backend's events
// that went unread with the lost stream returns, for a group subscription
// at its next poll, for a fan-out one once its reader's check of the stream
// (every BlockTime) found it gone, or empty since it was made again
// (TestReviewH75FlushAfterWipe). A
// lease kept across the loss (lease.Keep) is lost: another owner can
// acquire the key at once, with a token above every earlier one of the key
// (the counter is gone, so the server's clock in microseconds; see Fencing
// tokens), while the old Held lives until its next renewal finds no lease
// and ends it (ErrNotHeld): the two overlap for up to a renew interval and
// the renewal's round trip (TestReviewH75WipedLease: the Held ended
// 0.67-0.70s after the new owner won, at TTL 3s). Only the fencing token
// tells their writes apart. One gap is left after FLUSHALL or FLUSHDB
// (not after a restart, which takes longer than a millisecond): an event
// published in the same millisecond as the last entry a fan-out
// subscription read before the flush is numbered at or below that entry,
// and the subscription skips it.
//
// On a Cluster, go-redis sends a dead master's slots to that master until
// it reloads its map of slots, which it does on its own only every
// ClusterStateReloadInterval (60s by default). A Backend's calls and
// subscription reads that fail on a transport error or a MOVED reply ask
// the client to reload it, so that after the Cluster promoted the dead
// master's replica its slots work again soon after the promotion: within
// about a second on a Backend that kept calling them
// (TestClusterMasterFailoverResumes: a renewal, an acquire, a publish and
// a group delivery within 0-503ms, where each failed for the 15s the test
// waited before; under load, TestClusterFailoverUnderLoad in
// signals/loadtest: each signals runtime's Sends worked again 0.06-1.2s
// after it; TestReviewAASyncedClusterFollowsFailover with the sync
// options). A Backend that made no call to those slots since the master
// died sees its first call fail only after go-redis's dial retries to the
// dead address (1.7-4.2s with its defaults), and the next succeed
// (TestClusterMasterFailoverResumes: a lone publish, a GroupBacklog, a
// group's and a fan-out subscription's deliveries, a group Subscribe and a
// fan-out Subscribe, each on a Backend of its own). Other calls a Backend
// sends straight through the client (the passes' XPENDING and claims, acks)
// do not ask for a reload themselves; they recover with the first reload
// one of those calls asks for. The Cluster itself takes node-timeout (15s by default) and a
// vote to promote the replica.
//
// While a Cluster slot migrates (MIGRATING on its master, IMPORTING on the
// target, as redis-cli --cluster reshard leaves it for as long as it moves
// the slot's keys), go-redis follows the source's ASK replies, and so do
// the synced calls of the sync options, which go to the key's master's own
// client: they send the commands answered ASK again to the target, after
// ASKING, with the WAIT, which then counts the target's replicas
// (TestSyncClusterFollowsAsk). Lease scripts of a migrating slot cannot
// run until the migration ends, synced or not: Redis answers TRYAGAIN to a
// command of several keys in a migrating slot unless all of them are on the
// node that gets it, and the lease scripts declare the lease's revoked mark,
// which exists only after a revoke (once none of a lease's keys is left on
// the source, it answers ASK, and the target TRYAGAIN). A refused script
// did not run, so the single-lease calls (AcquireLease, RenewLease,
// TransferLease, ReleaseLease, GetLeaseOwner, RevokeLease,
// ForceRevokeLease, LeaseState, InspectLease) send it again, with a
// backoff of 10-200ms, until the migration ends or their ctx does (on a
// ctx without a deadline, for at most 5s, or until Close), and return the
// refusal then (TestLeaseCallWithoutDeadlineDuringEndlessSlotMove: 4.97s
// on a slot left half-moved; TestLeaseCallsRideThroughSlotMove: calls made during a 0.7s move
// returned done just after it; TestClusterReshardUnderLoad in
// signals/loadtest). Each script may so run twice, as go-redis's own retry
// after a lost reply may run it before the refusal, and each may: transfer
// and revoke carry a nonce that makes a second run report the first
// (TestForceRevokeRetriedAfterLostReply,
// TestForceRevokeNotRunAgainAfterLostReplyDuringSlotMove). RenewLeases
// does not wait: a renewal of a migrating slot fails, and lease.Keeper
// tries it again after min(TTL/10, its renew interval). A migration longer
// than what is left of a lease loses it, failing closed. Batches of lease
// scripts (coalesced calls, renewals, ListLeases' reads) are cut per master
// and sent in a pipeline of that master's own client, and the calls it
// answers MOVED or ASK go again one at a time through the ClusterClient: a
// ClusterClient pipeline of go-redis v9.23 can send one command to two
// nodes at once when a migrating slot's calls are answered both TRYAGAIN
// and ASK (TestMixedMasterBatchDuringSlotMove; only a batch whose masters
// the client's map cannot tell still goes in one).
//
// # Retention and cleanup
//
// A topic is one stream. [Options].Retention (pubsub.DefaultRetention,
// 100,000, as on every leasebus backend) is how many of its newest entries
// it keeps at least; about one publish in min(max(Retention/4, 1), 256) also
// runs a trim script, in the same round trip, that removes older entries
// only where every consumer group of the stream has acked them: below each
// group's oldest pending entry and up to its last delivered one. No trim
// removes an entry a group has not acked, so a group that stops reading
// (or keeps no member) makes its stream grow until it catches up or the
// topic is deleted; fan-out subscriptions are not counted and may miss the
// oldest entries once they fall more than Retention behind. A group that
// subscribes with StartFrom(Earliest) receives every event still kept: all
// of them up to Retention events (TestPubSubConformance's
// EarliestAfter10000Events, TestTrimOnlyBelowEveryGroup).
//
// [Backend.DeleteTopic] (pubsub.TopicDeleter, and the command "leasebus
// topics delete TOPIC") deletes a stream with its groups. [Options].
// StreamIdleTTL makes a stream expire after a time without publishes, with
// its groups and their unacked entries: it is not a trim. A group
// subscription made with pubsub.ExpireWhenDrained sets its stream to expire
// when one of its acks leaves the stream drained (in the same script as the
// XACK: lua/delete_drained.lua), and a PublishFor removes that expiry in
// the same script as its XADD (lua/publish_for.lua), as does the
// subscription's read that returns entries (lua/read.lua); a subscription
// that creates its stream (it had none) sets the expiry on it as it creates
// it (lua/create_group.lua: TestExpireWhenDrainedNewStreamExpires), and a
// claim that finds its entry deleted (Redis 7 drops such an entry from the
// pending list with no XACK) checks the stream in the same way
// (TestExpireWhenDrainedGoneAcks, TestExpireWhenDrainedNackedGone), as does
// the ack of a dead-lettered entry sent outside the acker
// (TestExpireWhenDrainedDeadLetterAck), so the signals
// runtime's inboxes go even when the process that held them was killed
// (TestExpireWhenDrained; signals' TestKilledOwnerLeavesNoInbox). The
// dead letters of such a subscription (pubsub.MaxDeliveries) are not
// expired with it: its dead-letter topic, "<topic>.dead", is a stream of
// its own, with no group and no expiry, which a trim keeps to its newest
// Retention entries and nothing else removes, so every ExpireWhenDrained
// topic that ever dead-lettered leaves one stream behind after it expired,
// until [Backend.DeleteTopic] of the dead-letter topic, or StreamIdleTTL,
// which expires it as any other stream
// (TestReviewH71DeadLetterTopicOfDrainedTopic). Lease keys
// expire with their lease; each lease key's fencing counter and state
// records go Options.FenceIdle and Options.LeaseStatusWindow after its last
// lease ended.
//
// Consumer names are [Options].Consumer plus a random suffix per Backend
// and a number per group subscription, so two processes given the same
// Consumer never share a consumer and its pending entries. A consumer goes
// when its subscription stops (Unsubscribe, Close) holding nothing; one
// that stops holding entries (handed back, or a member that died) goes once
// the member that takes them over holds them all; one left by a member that
// died holding nothing is deleted by a live member of the group after it
// was idle for 10 minutes (TestDeadMembersConsumerGoes). Each deletion
// checks and deletes in one script, only a consumer that holds nothing.
// Each group subscription also has a read guard, a small key in its
// stream's hash slot (<prefix>:{<topic>}:rguard:<consumer>, see "Clients and
// deadlines"): created as the subscription starts, deleted as it stops, and
// expiring 10 minutes after the subscription's last read when it is left
// behind (a member that died, a server that did not answer its cleanup). A
// subscription whose guard had to be set again (a copy of that command may
// still reach the server late) leaves a tombstone in it instead, which
// expires 10 minutes later. The round trip that
// creates the group and the guard is never retried by go-redis: when it
// times out, Subscribe fails (TestLateGuardCreateFailsSubscribe). A group
// whose member handed entries back (see "Hand-back") has a hand-back
// notice, <prefix>:{<topic>}:handback:<group>: deleted with the consumer of
// the latest hand-back once a member took its entries over and no entry
// handed back by any member waits any more, and expiring 10 minutes after
// that hand-back otherwise.
//
// # Connections
//
// A Backend's reads hold a bounded number of connections blocked in a
// read, however many subscriptions and topics it has: one for a standalone
// or Sentinel client, at most 4 per master on Cluster (while subscriptions
// come and go a retiring reader may stay blocked beside its replacement
// until its CLIENT UNBLOCK lands: up to 6 were seen on one master in a
// churn test sampling CLIENT LIST 30,000 times). Group subscriptions
// hold none (they read without BLOCK on the client's pool when the shared
// reader rings them). On Cluster, keys of different hash slots cannot
// share one XREAD: the first 3 slots to be read on a master get a reader
// each, which blocks as on a standalone client (when one of them stops, a
// slot of the shared reader takes its place); the others share a fourth,
// which reads them with one pipeline of non-blocking XREADs (a slot that
// had entries again at once, the others every 5ms after traffic on
// several slots, up to every 50ms when idle or when one slot is busy) and
// blocks on one of them in between, so an event in another of those slots
// may wait up to 50ms more, an idle master costs about 60 round trips a
// second, and a busy slot a few XREADs per event plus one per quiet slot
// per 50ms (measured in TestClusterSharedNodeReaderLatency and
// TestClusterBusySlotReadsPerEvent; figures in [Backend.Subscribe] and
// BENCHMARKS.md). A slot whose reads fail with an error of its own (-ASK
// while it migrates, -WRONGTYPE) backs off alone; the other slots of its
// reader are read as usual. The topics of one slot share one XREAD, so a
// topic's key overwritten with another type (-WRONGTYPE) stops every topic
// of its slot until the key is fixed or deleted, as it always did. A Ring is not bounded this way: each topic's
// reader takes a pooled connection for each of its reads.
//
// A group subscription's periodic pass (every half ack deadline: claim
// what other members left pending past the deadline, refresh what waits
// in its local queue) takes the pool too. On-demand subscriptions
// (pubsub.ReadOnDemand: the signals runtime holds one per active thread)
// run theirs at most 4 at once per Backend (on a Cluster, per master: a
// pass's calls all go to its key's master, whose pool is its own), and one
// whose tick finds none free skips it, so that their number does not take
// the pool from everything else, lease renewals first
// (TestOnDemandPassesBounded: 1,000 such subscriptions with a 1ms ack
// deadline, kicked every 5ms, kept at most 4 calls in flight where they
// had 1,000 waiting for the pool, and a lease call took at most 22-38ms
// where it took up to 261-485ms). Such a
// pass never waits for a handler slot while it holds one of the 4; while
// another consumer of its group holds entries it looks again at its next
// tick, so an entry a stale member holds is claimed once it is past the
// ack deadline even when no new kick comes (TestOnDemandPassSlotsNotHeld,
// TestOnDemandKickBeforeStale). Under heavy load an on-demand
// subscription's pass comes later than its ack deadline says; the other
// subscriptions are not bounded this way. On a Cluster, a master whose
// passes are slow (its replica stalled under PublishSyncReplicas: each
// claim waits PublishSyncTimeout for WAIT) keeps only its own slots, and
// the on-demand subscriptions of the other masters take over a dead
// member's entries as usual (TestOnDemandStalledMasterSparesOtherMasters).
//
// # Redeliveries
//
// A nacked entry of a group subscription with a Concurrency above 1 stays
// pending on its consumer, holding no handler, and is claimed again once
// its redelivery delay passed, rounded up to a sixteenth of the delay (at
// most 10ms more), so that entries nacked together come due together and
// are claimed in one pipeline of up to 64 (TestNackBurstRedeliveredInFewRoundTrips:
// 500 nacks came back in 19-20 round trips, one each before).
//
// An entry whose handler returned nil is acked through a per-master
// batch writer, a little after the handler returned. Until that XACK is
// written or given up on, none of the Backend's group subscriptions claims
// the entry, though it is still pending and, after a handler that ran past
// AckDeadline, idle long enough to be claimed: not the member that ran it
// (its reclaim pass, ClaimPending, a lost read's recovery) nor another
// member of the same Backend, whose claims ask the same writer
// (TestAckedEventNotTakenAgainBeforeItsAck checks the member that ran it:
// before, a lone member with handlers past the deadline ran 1-2 of 48 such
// events again a millisecond later, and with MaxDeliveries(1)
// dead-lettered them; no test isolates the other members' case, where a
// handler past the deadline is also taken over while it runs). On a server that stops answering, or
// cannot be reached, the writer tries again (backoff up to 2s) until the
// server answers or Close (10s after it began): nothing else of the
// Backend claims the entry meanwhile, the XACK lands when the server
// answers again, and Flush and the subscription's Unsubscribe wait for it
// (until their ctx ends; an Unsubscribe's clean-up gives up after 10s
// and returns its error). Only an error reply that stays (WRONGTYPE,
// NOPERM) is given up on, after nine tries, and the Flush or Unsubscribe
// waiting for it returns an error (TestReviewH66FlushReportsAckGivenUp), as
// does Close for acks it gave up on after 10s
// (TestReviewH66CloseReportsAcksGivenUp). (Before, every failure was given
// up on after nine tries: on a server that refused connections for 20s
// they ended in about 10s, Flush then returned nil with the entry still
// pending, and the lone member ran it again once Redis was back:
// TestReviewH66AckSurvivesRefusedOutage.) Members of other
// Backends cannot know: a handler that runs past AckDeadline may see its
// event run again elsewhere, as pubsub.AckDeadline says.
//
// # Hand-back
//
// A group subscription that stops (Unsubscribe, Close, and a Shutdown that
// did not give up on its handlers) hands back to its group, once every
// handler of it has returned, the entries it holds and runs no more: those
// it read and never started, with the delivery count of its read undone
// (the next delivery is the same attempt), and those it nacked and was to
// redeliver, keeping the attempts they were given (the next delivery is
// the next attempt, counted towards MaxDeliveries): waiting out their
// redelivery delay on a Concurrency(1) handler or holding none, or whose
// handler failed as the subscription stopped (pubsub.Policy: such an
// attempt is never dead-lettered). Each is handed back only if it is
// still pending on the subscription's consumer, checked and made
// claimable at once (idle a year) in one script (hand_back.lua), so an
// entry another member took over meanwhile stays with that member. The
// group's members take them without waiting for their periodic pass: the
// other group subscriptions of the same Backend are told at once; those of
// other processes read the group's hand-back notice (a key beside the
// stream, written with each hand-back) in a read's pipeline at most once a
// BlockTime, and a subscription that starts later reads it with its first
// read; each runs a pass when the notice changed. An on-demand member
// (pubsub.ReadOnDemand) of another process does not read the notice: it
// takes them at its next pass after a Kick. TestNackedEntryHandedBackOnStop
// (ack deadline 30s): a nacked entry reached a member of the same Backend
// or a subscription that started after the stop within 1-2ms, and a live
// member of another Backend within 1.7s (BlockTime 2s), as attempt 2, once;
// before, the nack of a Concurrency(1) handler, and an attempt that failed
// as the subscription stopped, stayed pending on the stopped consumer for
// the whole ack deadline (30s), and a Concurrency(2) nack, handed back
// already, waited for the other member's periodic pass (15s). Should the
// hand-back fail, the entries are taken over after the ack deadline, as a
// dead member's are; should the notice fail, at the members' next pass.
//
// A live member whose every handler has run one entry for longer than its
// AckDeadline (hung, or far slower than the deadline says) hands back the
// entries it read ahead and queued behind them the same way, unstarted, at
// its next pass, so that idle members run them rather than let them wait
// for as long as the handlers do (TestHungHandlerHoldsNoQueuedEvents:
// before, five events waited behind a hung handler for as long as it hung,
// their idle time refreshed; now an idle member that subscribed after the
// hang began had them 1.52-1.54s later, AckDeadline 1s, in 6 runs). A Concurrency(1) handler waiting out a
// nacked entry's redelivery delay is not counted as stuck. When that
// hand-back fails (the member cut off from the server), the entries stay
// queued; a handler starts a queued entry whose claim was last made or
// refreshed half an AckDeadline ago or more only after claiming it again
// at that idle time (XCLAIM JUSTID, no delivery counted), and leaves it
// to the member that took it over, or to the ack deadline when the claim
// fails (TestReviewH72BlackHoledMemberRunsTakenOverEvents: before, a
// member black-holed for 21s ran, once the hole healed, 256 events a live
// member had taken over and run meanwhile).
//
// Reading ahead has two consequences users see (review h53). A member reads
// up to Concurrency + BatchSize entries ahead of its handlers (Concurrency
// with pubsub.ClaimPending), and each read counts one delivery. When the
// member dies or is cut off before it starts one, or a ClaimPending member
// takes it from a live one, the next delivery of that entry is counted as
// attempt 2 although no handler ran it: MaxDeliveries counts deliveries,
// so with MaxDeliveries(1) such an entry goes to the dead-letter topic
// without a run (it is not lost: it is there), and with MaxDeliveries(n)
// it gets n-1 runs. Use n of 2 or more, or a small BatchSize to bound how
// many entries a death can cost an attempt. And entries handed back, or
// taken over from a dead member, reach their next member after entries
// published later that it already ran: publish order holds within one
// subscription's own reads, not across a hand-back or a take-over
// (pubsub's Order rule).
// While the stream's Cluster slot migrates, Redis refuses (TRYAGAIN) a
// script of both keys unless both are on the node that gets it, and the
// notice seldom exists: the entries then go back without it (members of
// other processes take them at their next pass;
// TestReviewBBHandBackWhileSlotMigrates).
//
// # Eviction
//
// Run Redis with maxmemory-policy noeviction: under memory pressure an
// allkeys-* policy may evict a fencing counter (a later tenure then gets a
// token that was already handed out) or a stream with unacked events, and a
// volatile-* policy may evict a live lease (every lease key has a TTL).
// [NewURL] reads the policy and logs a warning naming it when it is
// anything else (a server where CONFIG is disabled, as on some managed
// services, is tolerated); [Backend.CheckEviction] returns the same finding
// as an error matching [ErrUnsafeEviction], for a client given to [New] or
// a check at startup that should fail.
//
// # Fencing tokens
//
// A lease key's fencing counter expires [Options].FenceIdle (an hour by
// default) after its last lease could have ended; renewals push that back,
// so the counter always outlives the lease. A new tenure takes
// max(counter + 1, the server's clock in microseconds) as its token, so a
// key that comes back after its counter expired still gets a token above
// every earlier one (unless the server's clock went back by more than
// FenceIdle), and an idle key leaves no key behind. Tokens are therefore
// large numbers; only their order means anything. (The project's design
// note had the counter live forever; this departs from it on purpose, so
// that state stays bounded. TestLeaseKeysGoAway shows both halves.)
//
// # Clients and deadlines
//
// [NewURL] builds a client that honours ctx deadlines (go-redis's
// ContextTimeoutEnabled, which a URL cannot set); [Options].ConfigureClient
// adjusts the rest. A client given to [New] should honour them too. With one
// that does not, leases still fail closed — a lease.Held ends at its own
// loss deadline whatever its renew calls do, and RenewLeases returns when
// its ctx ends, as do the calls named below — but other single calls may
// block until the client's ReadTimeout when Redis stops answering; New logs
// a warning for such a client.
//
// go-redis ends a read it is blocked in at ctx's deadline only with
// ContextTimeoutEnabled, and never when ctx is cancelled. The single-lease
// calls (AcquireLease, RenewLease, ReleaseLease, TransferLease,
// GetLeaseOwner, InspectLease, LeaseState, RevokeLease, ForceRevokeLease),
// ListLeases, GroupBacklog, DeleteTopicIfDrained, DeleteTopic, Publish, PublishFor,
// PublishBatch and Subscribe's setup return when their ctx ends all the
// same, deadline or cancel, with any client, also under load
// (TestPublishCtxEndsUnderLoadOnStalledServer,
// TestSubscribeCancelledOnStalledServer, each named call:
// TestNamedCallsReturnAtCancelOnStalledServer): the error wraps ctx's and says the
// script or event was sent and may have run or been stored (TestCancelledCallOnStalledServer:
// within 1s of the cancel on a SIGSTOPped server; before, 5.0s, go-redis's
// ReadTimeout). The send then goes on in a goroutine of its own until the
// client answers or gives up (its timeouts, or Close of a client NewURL
// made), and Close and Shutdown wait for it (TestCloseWaitsForLeftPublishes,
// TestCloseWaitsForLeftGroupSetup). Flush's checks of a group's progress
// are sent the same way (TestFlushCancelledOnStalledServer: at the cancel;
// before, 4.8s). On a ctx already ended they send nothing and return its
// error alone (TestCancelledBeforeCallSendsNothing); a lease call that was
// never sent (its ctx ended before it was, or while it was queued, or the
// call before it failed: see below) returns an error that also matches
// lease.ErrNotSent: it did not run. A ctx that cannot end
// (context.Background) costs nothing; on one that can, a script sent alone
// waits in that goroutine, which costs the wake-ups of a second goroutine:
// BenchmarkLeaseCycleSerial, one caller against a local redis-server on a
// 2-CPU machine, measured 138 µs per acquire and release on such a ctx
// against 96 µs on context.Background (medians of 6 runs); with GOMAXPROCS=1
// the two were within 7% (2 runs). Publish pays the same way: a lone
// Publish on such a ctx took 71-76 µs against 54-62 µs before
// (BenchmarkPublishSerial/Cancelable, 3 alternating runs; on
// context.Background 57-59 µs against 54-61 µs). Under load the goroutine
// that sends for a leader keeps sending what queues behind it, batch after
// batch, so a caller never waits to lead one: one goroutine per busy spell,
// not per call (16 callers, 3 alternating runs: BenchmarkLeaseCycleCancelable
// 30.2-31.2 µs per cycle against 30.8-34.2 on context.Background;
// BenchmarkPublishPipelinedCancelable 6.2-7.5 µs per publish against 5.9-7.0,
// and 6.4-6.5 before the change). Before, a queued caller handed a batch sent it on
// context.Background and did not return at its ctx's end
// (TestCancelledCallsUnderLoadOnStalledServer: 32 callers on a NewURL
// client, the server SIGSTOPped under load, every call now back within 1s
// of the cancel or deadline; before, the last came back after 30-35s).
//
// On a ctx that cannot end, a call waits for the server or the client's
// timeouts, but not for those of every batch queued ahead of it: when a
// batch of publishes or of single-lease calls fails on a transport error
// (after go-redis's timeouts and retries: with its defaults 10s for a lone
// caller, and 35.2s in every run of review h56 and ours when 32 callers kept a NewURL client busy
// as the server stopped, the batch's retries waiting on pooled and freshly
// dialled connections whose handshakes time out too:
// TestQueuedCallsUnderLoadOnStalledServer, which holds it under a minute;
// pass a ctx with a deadline to wait less), the calls queued
// behind it, never sent, fail with it at once, with an error that says so
// and wraps the batch's (TestQueuedPublishesFailWithTheBatchBefore,
// TestQueuedLeaseCallsFailWithTheBatchBefore: 160 calls on
// context.Background on a stopped server all returned within 5.0s; before,
// batch after batch, the last after 45s). An error reply (a WRONGTYPE key)
// fails its own call only (TestQueuedPublishesSurviveAnErrorReply); on a
// Cluster client only the calls for the failed keys' masters fail with a
// batch, on a Ring only those for their hash tags
// (TestClusterStalledMasterSparesOtherNodes). A call so failed was not sent,
// so it did not run (TestNotSentLeaseCallsDidNotRun).
//
// On a Cluster client, concurrent calls are batched per master: the
// single-lease calls, publishes and group reads of the keys of one master
// go in batches of their own, one set of batches in flight per master. A
// master that stops answering holds up only the calls for its own keys;
// those for the other masters go on at their usual speed
// (TestClusterStalledMasterSparesOtherNodes: with one master of three
// SIGSTOPped on a default ClusterClient, 160,000-210,000 calls for the
// healthy masters completed in the first 4s, none slower than 9ms; before,
// when a batch spanned masters and go-redis answered it only once every
// node's part was done, 24-25 completed and the slowest took 40-45s; and
// in the signals runtime TestClusterStalledMasterSparesHealthyThreads:
// Sends to threads on healthy masters returned within 7ms and ran within
// 8ms). Group acks are written per master too, and a group Unsubscribe
// waits only for the acks of its own master
// (TestClusterStalledMasterSparesOtherAcks: an ack on a healthy master
// written within 8-10ms of its handler's return while an ack for the paused
// master waits; before, one pipeline carried every master's acks, and that
// ack held the others, and each Unsubscribe, until CLUSTERDOWN; in signals,
// a tenure that ended held the Sends to its thread, which then failed). A
// Flush still waits for every ack queued before it. Acks queued for a
// master before a failover moved its slots wait for that master's batch
// still; on a Ring all acks share one batch. A call whose keys are on
// several masters (a PublishBatch across topics) waits for each of them.
// The Backend keeps one set of batches per
// master address its client has sent to, for its life, at most 64; calls
// for masters beyond those share one. The first calls of a Backend on a
// Cluster client wait (each until its ctx ends at most) for one load of the
// client's map of slots, so that they too go in their masters' batches
// (TestFreshClusterClientQueuedFailFast: with one master of three stopped,
// 3 lanes, the healthy calls done within 1.1s, 598-599 of 600 calls for the
// stopped master failed fast as not sent; before, the first calls shared
// one set of batches, and the healthy ones waited 4.2-9.4s); only when no
// node answers that load do calls share one set of batches, until go-redis
// has a map. On a Ring, batches still span shards.
//
// go-redis retries a command that timed out or lost its connection
// (MaxRetries). Group reads are the exception: a read that runs after its
// client gave up would deliver entries to the consumer that nobody sees, so
// each read carries a command go-redis never retries, and each is an
// XREADGROUP inside a script (read.lua) that runs only if no later read of
// the same consumer ran and its subscription has not stopped: it checks and
// raises a sequence number kept in the subscription's read guard. A read
// that the network delivers late (a partition that heals while the request
// is still being retransmitted, a server that stalled) therefore delivers
// nothing once a later read ran (TestLateReadAfterChecksRunsNothing: a read
// held by a proxy past go-redis's ReadTimeout and released after later
// reads). Up to then it may run: after a failed read, the subscription's
// next reads are each followed, in the same pipeline, by a listing of what
// is pending on its consumer, and take what they did not see first, in
// stream order, as the same delivery attempt, until one listing finds
// nothing (TestStalledReadKeepsOrder, TestStalledReadDeadLettersNothingUnrun:
// a 7s SIGSTOP of the server during a read). A stopping subscription
// deletes its guard before it hands back what such a read delivered. The
// script costs the server about 10 µs per read more than a bare XREADGROUP
// (11.9 against 1.8 µs on one entry), a quarter of a busy group
// subscription's throughput (BENCHMARKS.md, "Fourth pass", has the commands).
package redisstreams
