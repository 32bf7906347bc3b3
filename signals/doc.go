// Package signals is the thread-ownership runtime of leasebus: exactly one
// process at a time runs the agent for a thread, signals sent to a thread
// from any process reach that owner, and queued follow-ups take over the
// thread without a gap.
//
//	rt, err := signals.New(ps, agent, signals.WithLeaseTTL(15*time.Second))
//	acc, err := rt.Send(ctx, "thread-42", signals.Signal{Type: "user.message", Data: msg})
//	// acc.Action: Woke (a run started here), Delivered (this process holds the
//	// thread), Forwarded (acc.Owner, another process, holds it)
//	err = rt.Close(ctx)
//
// # What a user must know first
//
//   - Send returns once the signal is stored: from then on it runs, as
//     long as some runtime stays alive, even if the sending process exits
//     at once; once, unless the run that took it lost its lease before the
//     signal was recorded done (a Redis that stopped answering for longer
//     than the TTL does that to every run it stalls:
//     TestLateLeasesUnderLoad/StallLongerThanTTL saw up to 22 such signals
//     per run), and then the next run gets it again marked Redelivered (see
//     the next point). "Stored" means on the Redis master: a restart
//     without persistence, FLUSHALL or FLUSHDB loses every signal not yet
//     run, and the threads' leases (a run leased before it goes on until
//     its next renewal finds no lease, up to a renew interval, while a new
//     run of its thread may start at once elsewhere with a higher token);
//     the runtimes go on by themselves, and every signal sent after it
//     runs, once unless marked Redelivered, one run at a time per thread
//     (TestReviewH75WipedServerUnderLoad: 3 runtimes, runs leased before
//     it ended 0.1-0.6s after it at TTL 2s; TestReviewH75CancelAfterWipe).
//     A failover can
//     lose what the master had not replicated yet, unless the backend was
//     built with redisstreams.Options.PublishSyncReplicas (and, for
//     fencing, LeaseSyncReplicas) set to the number of replicas (see the
//     Sentinel failover point below). Retry a failed Send with the same
//     Signal.ID; within the dedupe window a duplicate ID is not run again. Send returns when its ctx
//     ends, also while Redis does not answer (TestSendReturnsAtCtxEndOnStalledServer).
//     An acquire such a Send left behind, or a hand-off whose reply was
//     lost, may lease the thread to a run that never starts when Redis
//     runs it, however much later (a server that was stopped, a network
//     that black-holed the connection and healed): the runtime takes that
//     lease over for that run, which reads the inbox and releases the
//     thread, so the thread does not wait for the lease's TTL
//     (TestLateAcquireAfterSettleIsAdopted, TestHandOffReplyLostIsAdopted,
//     TestLateStragglerAfterTakeover). A release that failed leaves the
//     thread leased to a tenure whose runs are over: the runtime releases
//     that lease when it finds it and takes the thread for a new run, with
//     a new Run.ID and a higher token (TestReleaseFailedIsTakenOver). The process remembers such runs
//     for 10 minutes (at most 10,000 threads), and Close releases their
//     leases; a copy that runs later than that, or after Close, leaves the
//     thread to wait for the TTL.
//   - One run at a time per thread, in send order. A run gets its first
//     signal in Run.Signals; [Run.Next] declares every signal the run has
//     taken so far done (recorded in the thread's done record and acked; it
//     is never run again) and returns the next queued one. Returning from the
//     agent does the same for the signals it took. A run whose lease is lost
//     (its ctx ends) acks nothing: the next owner gets those signals again,
//     marked Redelivered ("may have run").
//   - The agent must stop when its ctx ends (lease lost, Cancel, or Close
//     giving up), and should fence its side effects with Run.Token.
//   - Connections: a runtime on redisstreams holds one Redis connection
//     blocked in reads, whatever the number of threads (on a standalone or
//     Sentinel client the Backend's shared reader serves the work group, the
//     notice watch and the control topic; on a Cluster, one per hash slot of
//     the work and control topics). An active thread holds none: its tenure
//     reads its inbox without blocking, when told to. go-redis's default
//     pool (redisstreams.NewURL) is enough:
//     TestThousandActiveThreadsDefaultPool (in signals/loadtest, with the
//     other load and fault tests) runs 1,000 threads active at once on it
//     with no pool timeout and no lost lease,
//     BenchmarkActiveThreads10000 10,000 (see BENCHMARKS.md;
//     it lost 3,632-6,000 of 10,000 leases to pool contention until the
//     inbox subscriptions' periodic passes were bounded, and now fails when
//     one is lost). On a Cluster, a ClusterClient with go-redis's defaults
//     (5 connections per GOMAXPROCS per master) is enough too:
//     TestThousandActiveThreadsCluster runs the same 1,000 threads on three
//     masters, with at most 2 connections blocked in reads, on the master
//     of the work topic (without -race, 10,000 passed). No lease is lost
//     as long as the process gets the CPU to renew them: one starved of it
//     misses its batched renewals and, failing closed, loses every lease
//     of the batch at once (TestThousandActiveThreadsCluster lost all 1,000
//     held to half a core under -race, the standalone test at a third of
//     one; a Cluster renews with one script per lease, each in its own
//     slot, where a standalone server takes 1,000 in one).
//   - On a Redis Cluster, a master that stops answering holds up the threads
//     whose keys it holds, and every Send when it holds the work topic; the
//     other threads go on (redisstreams batches calls per master:
//     TestClusterStalledMasterSparesHealthyThreads). Under load
//     (TestClusterStalledMasterUnderLoad in signals/loadtest: 4 runtimes on
//     default ClusterClients, 230 threads, a master without the work and
//     control topics stopped 12s, past the node timeout, on a Cluster with
//     cluster-require-full-coverage no; with the default, yes, every master
//     answers CLUSTERDOWN once the node timeout passed), in 4 runs of
//     2026-11-28 under -race: 3,371-3,971 Sends to the other threads in the
//     pause, the slowest 72-98ms, their signals given at most 73-137ms
//     after the Send began; a runtime black-holed in the pause had its
//     healthy threads run elsewhere 2.1-3.8s later (TTL 3s), and one closed
//     in the pause had them run elsewhere 64ms-3.8s after Close began
//     (Close ended a TTL after its last run, its releases on the stopped
//     master unanswered). A process that starts while a master is stopped
//     may wait go-redis's ReadTimeout (5s) at its first command, whatever
//     master that command is for: a new ClusterClient first loads the
//     command table (COMMAND) from a node picked at random.
//   - A Sentinel failover: Sends fail until the client follows the
//     promotion, and the runtimes go on by themselves. In
//     TestSentinelFailoverUnderLoad (3 runtimes on failover clients with
//     go-redis's defaults, 100 threads under load beside another package's
//     tests, the master SIGKILLed, promoted 5.1-5.6s later with
//     down-after-milliseconds 2000; 15 runs) Sends worked again 2-378ms
//     after the failover settled, every thread with work waiting ran
//     within 2.9s of it, no accepted signal was lost or run twice
//     unflagged, and 1-19 signals per failover ran again, marked
//     Redelivered (their runs' done records or acks did not make it).
//     Replication is asynchronous: a failover can lose the last writes a
//     master acknowledged (signals, acks, lease writes, fencing counters;
//     README, "Not offered"). With redisstreams.Options.PublishSyncReplicas
//     and LeaseSyncReplicas set to the number of replicas, a failover that
//     loses writes loses no accepted signal and runs no thread twice at
//     once: TestSentinelLostWritesUnderLoad stalls replication for a
//     second under the same load, then kills the master; with both at 1
//     (its one replica), 0 accepted signals were lost and none ran twice
//     unflagged in 7 runs (both asserted), where without them 11-15 were
//     lost and 6-12 ran twice unflagged. The read that gives a signal to a run waits for
//     the replicas too: a signal a run was given is given again after such
//     a failover only marked Redelivered (TestSentinelLostReadRunsAgain;
//     before that wait, it came again unmarked); so do the claims with
//     which a new tenure takes an inbox's pending signals over
//     (TestPublishSyncClaimOfUnsyncedRead in redisstreams).
//     The cost: while fewer
//     replicas are connected than they ask, every Send, acquire, renewal
//     and inbox read fails (there, for the 10-11s until the sentinel
//     made the restarted old master a replica; the runtimes then went on by
//     themselves), and every Send waits for a replica's acknowledgement
//     (BENCHMARKS.md, "Publish replica sync"). Keep the sentinels'
//     down-after-milliseconds well above the longest pause a loaded master
//     can have: with 1000, the sentinel sometimes deemed a just-promoted
//     master down (its first PING answered more than a second after the
//     switch) and failed over again (the sentinel's log of 1 of 15 runs
//     under the same load shows it; 3 earlier runs of 19 looked the same);
//     the deposed master had taken writes for about a second, and 12-15
//     accepted signals were lost with them when it was made a replica
//     (and some acks, so that signals ran again unflagged).
//   - Cost and speed: Send is two Redis round trips (one when this process
//     holds the thread). A forwarded signal reaches its owner's run about
//     0.6-0.7ms after Send began when one is in flight (p99 1.5-3ms). At half
//     the maximum rate of a 2-core machine shared with redis-server, the
//     99th percentile was 12-41ms with the 3 runtimes in one process (the
//     garbage collector's cycles cause most of it; 2026-11-23) and 14-18ms
//     with each in its own process (2026-11-22); 3 runtimes × 1,000 threads
//     on those 2 cores ran 4,700-12,700 signals/s on 2026-11-23 (one build
//     spanned most of that range within hours: the figure follows the
//     shared machine's load), 1.04-2.2× the build before the redesign in
//     the same run (1.04-1.21× on the quiet machine, where that build
//     seldom fell into its slow mode). The process spends about 77-220µs of
//     CPU per signal and redis-server 59-145µs. BENCHMARKS.md has the
//     commands and figures ("Sixth pass", "Seventh pass").
//   - A thread stays with the process that ran it for the linger time after
//     a run (DefaultLinger, 2s): follow-ups sent meanwhile reuse the tenure.
//     Shorten it with WithLinger when threads should move sooner.
//   - Takeover: a dead owner's thread runs again elsewhere within about
//     TTL + recovery interval while signals wait behind long runs elsewhere
//     (within TTL + recovery + 1s: TestProcTakeoverBehindBacklog with 500
//     signals behind 30s runs on 20 threads, TestProcTakeoverBehindBigBacklog
//     with 5,000 behind 60s runs on 100 threads). These bounds need CPU for
//     the live processes: on 2 cores at load average 4-5 (test binaries
//     compiling or other packages testing beside the suite, 2026-11-29),
//     TestProcTakeoverBehindBigBacklog twice saw the takeover 4.0s and
//     4.25s after the kill (bound 3.2s; 2.00-2.04s in 3 timed runs alone, 2.11-2.69s
//     in 3 runs beside two CPU-bound processes; CI passed it).
//     While sends keep
//     streaming to busy threads (TestProcTakeoverUnderSendStream, 400
//     signals/s to 1,000 threads in 60s runs, at TTL 2s with recovery 200ms
//     and at the default TTL 15s with recovery 1s; bound TTL + recovery +
//     2s): taken over 6-243ms after the dead owner's lease lapsed in 18 of
//     19 timed runs of 2026-11-27 (16 of them within 44ms; 2.0-2.2s and
//     15.0s after the kill), and once 1.07s after it (3.04s after the kill,
//     TTL 2s), when the dead owner's own notice waited for a handler slot
//     behind the busy threads' notices; before the lapse watch below,
//     0.5-3.7s after the lapse, and up to 18.7s after the kill at the
//     default TTL. A runtime whose notice handler found a thread held tries
//     it again the moment that lease can lapse (see "Takeover at the lapse"
//     in the Design section). Close starts no run (exactly: no
//     RunStarted event has a Time after the Closing event's, the moment
//     Close began; a run committed to just before may reach the agent
//     just after Close was called, TestCloseClosingEventOrdersRuns),
//     lets running runs finish, and hands its signals to the live runtimes, which start
//     them within a recovery interval (TestProcCloseHandsOver); a Send
//     still publishing when Close began reports Forwarded and is run by
//     another runtime as promptly (TestSendWokeDuringClose). Close's ctx
//     bounds how long it waits for the runs (it cancels them when ctx
//     ends, then gives the teardown one second); whatever its ctx, the
//     teardown ends about a lease TTL after the last run returned (or after
//     Close began, when the runs were over before: review h69 saw a
//     black-holed runtime with no run take 15s at the default TTL), also
//     on a server that stopped answering (TestCloseNoDeadlineOnStalledServer).
//   - Limits: see "Limits" below (dedupe window and size, Cancel's reach,
//     what a pubsub without optional capabilities loses).
//
// # Design
//
// Every accepted signal goes two places: the thread's durable inbox, topic
// [InboxTopic] ("signals.thread.<thread>"), and a wake notice on the shared
// [WorkTopic], which every runtime consumes as one member of [WorkGroup] with
// an ack deadline of half the lease TTL. First Send tries the thread's lease
// ([LeaseKey]); the winner starts a tenure (Woke), a process that already
// holds it has nothing more to do (Delivered), and otherwise the holder is
// named (Forwarded). Then it publishes the inbox entry and the notice, in
// that order, in one step (pubsub.BatchPublisher; on redisstreams one
// pipeline), and kicks the local tenure, if any. That is two round trips on
// the fast path: acquire, then inbox and notice (one for Delivered; on a
// Redis Cluster, where the inbox and the work topic are in different hash
// slots, the inbox entry and the notice take one round trip each). The
// notice goes out only after the acquire was decided, so no notice handler
// races its own sender for a free lease: a handler that finds the thread
// free may take it at once. A tenure started by the acquire may read its
// inbox before the entry is there; it does not end before the Send's
// publish returned, and the kick after the publish makes it read again.
//
// The inbox publish creates [InboxGroup] in the same round trip if it is
// missing (Publication.Group, or pubsub.GroupPublisher on a pubsub without
// pubsub.BatchPublisher; both leasebus backends have both), so retention
// (however small) never trims a signal sent before the thread's first
// tenure subscribed.
//
// A tenure is one process holding a thread's lease. Only a tenure reads the
// inbox: it subscribes as the single member of [InboxGroup], from the earliest
// entry the group has not consumed, with Concurrency(1),
// pubsub.ClaimPending and pubsub.ReadOnDemand, so entries arrive in publish
// order, one at a time, whatever an earlier owner had taken and not
// finished comes first, and the subscription holds no connection waiting:
// it reads once as it starts, then each time it is kicked. Every path that
// learns of a signal for a thread this process holds kicks it after the
// signal is in the inbox: a local Send (Delivered), the runtime's fan-out
// watch of [WorkTopic] (every runtime sees every wake notice and kicks its
// own tenure of the notice's thread: that is how a Forwarded signal reaches
// the owner, one read later), and a notice handler that finds a local
// tenure. Only the first of these reads: news of a signal (named by its
// wake notice) that another of them kicked for less than 250ms ago kicks
// nothing (one inbox read per signal: TestInboxReadOncePerSignal). The lease
// is fenced, so the tenure is the inbox's sole legitimate reader, which is
// what ClaimPending asks of its caller. Each delivery starts a run, or is given
// to the running run through [Run.Next]. An entry is acked only once the run
// is done with it (when the agent asks for the next signal, or returns) and
// only while the run's lease is live: the lease is checked right before the
// done record is written and again right before the ack; a run whose lease was
// lost leaves its entries unacked for the next owner. When a run
// ends the tenure waits the linger time for the next entry; if one comes, the
// lease passes to a new run owner with TransferLease (lease.Held.Transfer,
// one script on a provider that reports the new token, lease.TokenTransferer),
// so the key is never free; if none comes, it unsubscribes and releases.
//
// A tenure that decided to end (its linger time passed) reads no more
// entries but holds the lease until its release returns: a Send landing in
// that moment is told the thread is held (Forwarded, or Delivered in the
// owner's process) and its signal is left for whoever takes the thread next.
// The runtime closes that window without waiting for a recovery interval.
// The ending tenure stays registered in its process until it released, so a
// local Send that meets it after it stopped reading waits for the release
// and then tries the lease itself (usually Woke), and a local notice handler
// waiting on it acts the moment it ended. For the other processes, two
// things together close it, however long the release takes: a tenure that
// released looks at its inbox once more (one script; on redisstreams the
// deletion of a drained inbox) and, when a signal came in meanwhile, takes
// the thread again (a Recovered tenure); and a notice handler of another
// process tries the lease at once when its notice comes, and again (for
// the notices of that thread that came while it watched, at least once)
// before it lets the notice go: a signal published before the release is
// found by the first, one published after it by the second
// (TestSendToEndingTenure, TestFollowerReleaseAfterWatchLeft: released
// 600ms after the Send, longer than any notice is held, and run at once).
//
// Lease owners are "<process>/<run id>", fresh per run, so each run is its own
// tenure with its own fencing token; lease.Keeper renews them and cancels the
// run's ctx before the lease can expire when renewal fails or is refused.
//
// Each thread keeps a done record: the hashes of the IDs of its last
// [DedupeEntries] run signals (SHA-256 cut to 128 bits, so no ID, crafted or
// not, is taken for another in practice; at most 23 bytes per ID whatever
// its length; records of the older 48-bit format are still read and age
// out), kept for the dedupe window
// ([DefaultDedupeWindow]), stored as the owner string of the lease key
// "signals.done.<thread>" and updated by the holder with TransferLease as a
// compare-and-swap. A delivered entry whose ID is in the record (or in this
// process's cache of done thread/ID pairs, compared by value) is acked
// without running: that is how a
// duplicate Send, or a redelivery of a signal whose ack was lost, runs once.
// A record write that fails is tried again, with a backoff of 20-400ms,
// for up to 2s and not past the lease's loss deadline as the run ended
// (a call never sent because the one before it failed, a connection reset,
// a Cluster slot that migrates: TestDoneRecordWrittenWhileItsSlotMoves,
// TestDoneRecordWriteRetriesCallNotSent); the run's entries are acked only
// after it. If it still fails then, they are acked all the same (the run
// happened) and their IDs are missing from the record: a duplicate Send of
// one of them, at a process that has not cached it, runs it again, as after
// an expired record.
//
// A wake notice is acked only when its signal is in the done record (or the
// local cache). Its holder waits on the local tenure when this process holds
// the thread, and goes on at once when that tenure ends; otherwise it tries
// the lease at once: when it wins it starts a tenure (a recovery), and when
// another process holds it, it checks the done record and the lease again
// after 20ms, 40ms, 80ms and so on up to the recovery interval. One handler
// per thread and process does that, the thread's watcher
// (signals/watch.go); a notice of a thread another handler of this process
// watches is acked at once when what this process knows (its tenures, its
// cache, the record as the watcher read it within the last recovery
// interval) shows its signal done, and nacked otherwise; so is a
// redelivered notice of a thread checked less than half a recovery interval
// ago. The watcher owes a notice that followed it on its first delivery one
// try of the lease after it came: at its next check, or as it leaves (see
// above). The
// first delivery of a Woke send's notice stays out of this. A handler holds a notice at
// most 250ms on its first delivery (20ms on later ones; a quarter of the TTL
// when that is shorter) and then nacks it; the work subscription redelivers
// it after the recovery interval (pubsub.RedeliveryDelay and RedeliveryCap),
// and on redisstreams a nacked notice waits holding no handler slot. So no
// handler waits for a run to end: notices of threads busy with long runs
// cycle every recovery interval at the cost of about one check per thread,
// hold one handler slot per thread at most, and never keep another
// thread's notice (a dead owner's) from being handled. The notice names the Action of its
// Send: for a Woke send, whose own new tenure reads the signal unless it
// loses the lease, the handler checks only the done record for the first
// recovery interval. So while any signal is not done, some notice for its
// thread is unacked and will keep some runtime trying to take the thread,
// at least once per recovery interval.
//
// Takeover at the lapse: the tries above come when a notice comes back, and
// under a stream of sends to busy threads a notice comes back behind
// thousands of others. So a handler whose try found the lease held notes,
// per thread, when that lease lapses unless renewed (the acquire reports
// the time left: lease.HeldError.TTL); a later try that sees the lease
// renewed or handed on moves the time later. When the time comes the
// runtime makes one try itself: first whether work waits for the thread
// (its inbox group's backlog, pubsub.BacklogReader: an entry unread, or
// read and not acked, and when the backlog cannot be told, work is taken to
// wait; without one, whether the noted notice's signal is still not done),
// then, if so, the lease (a Recovered tenure when it is free); when the
// lease is held again, it notes the new lapse (when the backlog did not
// tell, only within max(TTL, two recovery intervals) of a notice that found
// it held). An entry
// lives while another process holds its thread with work waiting (a live
// holder's entry comes due about once per renewal that no notice of this
// process saw, at two round trips each), and goes at the first try after
// the work is done (signals/lapse.go; TestTakeoverAtLeaseLapse,
// TestLapseStaleNoticeHeldThread, TestLapseNotedSignalDone,
// TestLapseKeptWhileWorkWaits, TestLapseNotedSignalDoneLagUnknown); when the
// backlog cannot be told, at the latest max(TTL, two recovery intervals)
// after the last notice that found the thread held, and a holder that
// releases meanwhile leaves the drained thread to one Recovered tenure
// (TestLapseEntryWhenBacklogUntold).
//
// # Guarantees and how the tests prove them
//
//  1. One owner: the lease admits one holder; each run is a new tenure with a
//     higher token and its ctx ends when the lease is lost. Proved by the
//     multi-process soak (each signal's start is a fenced write in Redis that
//     rejects a token lower than the highest seen while the writer still
//     believes it holds the thread) and TestTwoRuntimesForwardAndExclusive.
//  2. No lost signal: the inbox and the notice are published before Send
//     returns; the notice stays unacked until the signal is done. Proved by
//     the sender-exits, owner-killed and soak tests. A signal sent while its
//     owner's tenure ends (after its linger time, before or after it stopped
//     reading, before it released) reaches an agent without waiting for a
//     recovery interval: TestSendToEndingTenure holds a tenure at each of
//     those points with a test hook, sends from the owner's process and from
//     another one, and requires the signal within 10s with a recovery
//     interval of a minute and a TTL of two (BenchmarkEndingTenureForwarded
//     measures it: a few milliseconds). A signal a run had taken
//     when its owner died is given to the next owner with
//     Signal.Redelivered set and a higher token; a duplicate signal ID within
//     the dedupe window is not run again (TestDuplicateIDRunsOnce). The soak
//     records which process started each signal and allows a second run only
//     of a signal the killed process started and never got past.
//  3. Order: one reader per thread, one entry at a time, in publish order,
//     also across owner death: a new tenure claims the entries its
//     predecessor had taken and not finished (pubsub.ClaimPending) and runs
//     them first, in publish order, marked Redelivered, before any newer
//     signal, without waiting for an ack deadline. The inbox subscription
//     reads no entry ahead of its handler, so few signals are marked
//     Redelivered without having run: only one an earlier tenure had taken
//     from the inbox and not yet given to a run when it died or ended.
//     Agents read the flag as "may have run before", never as "did run".
//     Proved by TestOrderAndHandOff, TestProcOwnerKilled and the soak, which
//     checks every thread's order strictly: a signal may run after a later one
//     only if it is marked Redelivered (none does when an owner is killed). A
//     stale owner (paused past its TTL) that reads one more entry before it
//     notices the loss is the one exception: that entry comes back after the
//     inbox ack deadline, marked Redelivered.
//  4. Gap-free hand-off: a run that ends with signals queued transfers the
//     lease to the next run. Proved by the gap-free test polling the lease
//     key every millisecond.
//  5. Takeover: a dead owner's notices come back after the ack deadline (half
//     the lease TTL) and the lease expires after the TTL; a live runtime then
//     wins the lease within one recovery interval, claims what the dead owner
//     had taken and drains the inbox. Proved by the owner-killed test and,
//     under load, by TestProcTakeoverBehindBacklog (500 signals queued
//     behind 30s runs on 20 threads of another process: taken over 2.2s
//     after the SIGKILL, bound TTL 2s + recovery 200ms + 1s) and, while
//     sends keep streaming to busy threads, TestProcTakeoverUnderSendStream
//     (at TTL 2s and at the default TTL, bound TTL + recovery + 2s; see
//     "Takeover" above).
//     A live runtime whose notice found the lease held tries it again the
//     moment it can lapse (TestTakeoverAtLeaseLapse), so the takeover does
//     not wait for that notice to come back through the handler slots.
//  6. Fail-closed: the run ctx is the thread lease's lease.Held context: it
//     is cancelled as soon as renewal is refused and, at the latest, at the
//     Held's loss deadline (start of the last successful renewal + TTL −
//     TTL/10), whatever the renew calls and the Redis client do; acquire
//     errors are returned, never taken as a win. Proved by the SIGSTOP test
//     and TestProcOwnerBlackHoled (the owner's network black-holed mid-run:
//     its run ctx is cancelled before another process's run starts). Without a lease provider New falls back to lease.Noop and logs
//     one warning, unless the pubsub implements [CrossProcessReporter] and
//     reports false (TestNoopFallback).
//
// # Control
//
// [Runtime.Cancel] cancels a thread's running run from any process, and
// [Runtime.Status] reads a thread's state; a [Controller] does both without
// being a Runtime (the leasebus command uses one). Every Runtime subscribes
// to [ControlTopic] (fan-out, from the latest event); a Controller does at
// its first Cancel that asks another process, so one that only reads status
// holds no subscription. Cancel reads the
// thread's lease: its owner "<process>/<run id>" names the process, which
// Cancel asks on ControlTopic (or directly when it is itself) and whose
// answer it waits for. The owner cancels the context of the run that holds
// the thread with a [*CancelError] cause carrying the reason; a cancel that
// arrives while the tenure hands the thread to its next run (a delivery was
// taken, TransferLease not yet done) is kept and cancels that run as it
// starts, and Cancel answers only then. A run whose ctx ended only by
// Cancel (its lease still live) counts its signals as done, like a run that
// returned: they are recorded and acked, not run again, and the tenure goes
// on to the next queued signal in inbox order. With [DropQueued], Cancel
// first publishes a mark into the thread's inbox (with a wake notice, so
// that a runtime reads it and the inbox is deleted when nobody holds the
// thread); the owner then records and acks, without running, every entry
// before the mark, and its tenure does not end before it read the mark,
// whatever its linger time, while the inbox group has entries left for it
// (pubsub.BacklogReader) and for at most half the dedupe window (before,
// an inbox read slower than the linger time ended the tenure, and the next
// one ran those entries: TestReviewH71DropQueuedSurvivesTenureEnd; a mark
// deleted by hand: TestReviewH71DropPendingWithMarkGoneEndsTenure). The mark is recorded in the done record as it is read:
// a request that reaches the owner after its mark was read (a Send woke
// the owner in between) drops nothing, so signals sent after Cancel
// returned always run (TestDropMarkRaceNatural). Several Cancels with
// DropQueued whose requests come in any order drop up to the last of
// their marks (TestTwoDropCancelsOutOfOrder). An owner that
// does not answer before Cancel's ctx ends (or [DefaultControlTimeout])
// makes Cancel fail with [ErrUnreachable]; a process that answers it has no
// tenure of the thread makes Cancel read the lease again (the thread moved)
// and ask the new owner, or report no run when the lease is unchanged.
//
// Cancel relies on today's delivery path in three places: the tenure loop
// (session) is the one place where a run starts (registering its cancel
// function) and where a hand-off takes a delivery before TransferLease; the
// per-thread inbox, read in order by the one tenure, is what makes "the
// signals queued after it run next, in order" and the drop mark work; and
// the done record is how a cancelled signal counts as done.
//
// Status reads the lease (owner, token, time left; lease.Inspector) and the
// inbox group's backlog (pubsub.BacklogReader: entries not yet delivered to
// the owner, entries delivered and not acked, time of the newest entry).
// Proved by TestProcCancelFromThirdProcess (a third process's Cancel stops
// the owner's run, whose agent sees the reason as context.Cause, and the
// queued signals then run once each, in order), TestProcCancelDuringHandOff
// (a test hook holds the owner between two runs),
// TestProcCancelUnreachableOwner (SIGSTOPped owner: ErrUnreachable) and the
// in-process TestCancel* tests. BenchmarkCancel measures Cancel start → the
// run's ctx done: see BENCHMARKS.md.
//
// # What a thread leaves behind
//
// A thread that ran leaves, per key of the backend: its inbox while a
// tenure holds it or signals wait in it (a tenure that ends with the inbox
// drained deletes it, when the pubsub implements pubsub.DrainedDeleter (the
// runtime finds it, and pubsub.BacklogReader, also on a pubsub a wrapper
// such as the otel module's wraps: pubsub.As looks through Unwrap), as
// redisstreams does; when the tenure lost its lease or the deletion failed,
// the runtime tries again, at once and then with a backoff from the recovery
// interval up to a minute while the server does not answer, deleting the
// inbox only if nothing in it is unread or pending, until it did or another
// tenure uses it (when a signal waits there, it takes the free thread and
// runs it: TestTidyWakesAnInboxLeftUnread), and once more as Close ends: TestFootprintAfterRedisStall,
// a 4s SIGSTOP of the server while 20 tenures linger); its done record, for the dedupe
// window; and, on redisstreams, the lease state records for
// Options.LeaseStatusWindow and the fencing counters for Options.FenceIdle
// after the last lease of its keys ended. After the longest of those an idle
// thread leaves nothing, and its next run still gets a higher token (a
// tenure after the counter expired takes the server clock in microseconds).
// TestThreadFootprint runs 10,000 threads on a real redis-server and finds
// at most the shared work and control topics under the prefix once they are
// idle past those windows, besides what each live runtime keeps (on
// redisstreams, the read guard of its work-group subscription, deleted as
// it closes). To remove a thread's state at once, delete its
// inbox (`leasebus topics delete signals.thread.<thread>`, or
// pubsub.TopicDeleter) once no process holds the thread — this drops any
// signal still queued for it; its lease keys and done record expire on
// their own. Close starts no new run and hands the wake
// notices it holds to the live runtimes (TestCloseStartsNoRun).
//
// A process killed (or cut off from the server for good) while its tenures
// linger on drained inboxes cannot delete them: on redisstreams each inbox
// then goes on its own, 10 minutes after the ack that drained it, or three
// first waits (the longer of the linger time and a quarter TTL plus 100ms)
// and two lease TTLs when that is longer, since the inbox subscription asks
// for it (pubsub.ExpireWhenDrained) and every signal stored with its group
// takes the expiry back in the same step as its add, as does a tenure's
// read that returns signals (TestKilledOwnerLeavesNoInbox, with the
// 10-minute floor lowered for the test: 10 inboxes of a SIGKILLed process,
// gone 13s after the kill with TTL 2s and a 3s linger; before, 9-10 of 10
// stayed with no expiry). One killed or cut off after a run's done record
// was written and before its backend wrote the inbox entry's ack leaves
// the entry pending, so the inbox never drains: a live runtime that acks
// the signal's wake notice as done looks at the inbox a lease TTL later
// (its lapse watch) and, finding the entry pending and the thread free,
// takes the thread, whose tenure acks the entry and deletes the inbox
// (TestReviewH65CutAfterRecordLeavesInbox: gone about 3s after the cut,
// where it stayed for ever; review h65). That needs the notice to reach a
// live runtime: so on a backend that tells when it has written a
// delivery's ack (redisstreams), the owner acks a signal's wake notice
// only after the signal's inbox entry (review h65: when the two acks raced,
// a process killed between them left no notice and the inbox for ever:
// TestReviewH65OwnNoticeAckBeforeInboxAck failed 2 of 6 without that
// order); a notice whose inbox ack is not written within its handler's
// hold (a slow inbox master, on a Cluster another master than the work
// stream's), or that a follower finds done, is nacked and comes back
// rather than acked (review h68: TestReviewH68NoticeAckWaitsForSlowInboxAck,
// TestReviewH68FollowerDoneWaitsForInboxAck). TestReviewH65KilledUnderLoadLeavesInboxes SIGKILLs a process
// sending to and running 200 threads on default clients: every inbox gone
// 5.8s after the kill in 4 of 4 runs (before: 3-8 stayed in each run). The
// read guard of each of its subscriptions stays 10 minutes after its last
// read too (redisstreams doc). The inboxes get the expiry only on a pubsub whose signal publishes carry the inbox
// group (it is a pubsub.BatchPublisher or pubsub.GroupPublisher itself,
// not only through pubsub.As): through a wrapper without either they get
// none, and stay as before (TestKilledOwnerWrappedKeepsSignal).
//
// A signal stored without its group does not take the expiry back: one
// sent through such a wrapper by another process (the owner on a pubsub
// that asks for the expiry), or by a process of a version before it during
// a rolling upgrade. Its thread's next tenure reads it, which takes the
// expiry back; but when no runtime reads it for the 10 minutes after its
// owner, killed, drained the inbox (every runtime down that long, say),
// it goes with the inbox (TestKilledOwnerMixedSenderKeepsSignal keeps it
// through a 16s outage). Give every process a pubsub that publishes with
// the group, as redisstreams and the otel module's wrapper do.
//
// In memory, a runtime keeps nothing for a thread once it holds no tenure,
// lapse watch, inbox to tidy or given-up acquire of it (each goes as
// described above), except in four tables, which do not shrink when the
// work ends: the done cache (the newest 65,536 thread/ID pairs this
// process ran); when it first received each wake notice it has not acked
// (one that it nacked and another runtime then acked stays too), dropped
// once older than 10 minutes; what it knows of the clean ends of its
// tenures of each thread (one entry per thread), dropped once older than
// 10 minutes; and its notice handlers' last reads of each watched thread's
// done record (up to 256 IDs each), dropped once older than a recovery
// interval. Those drops happen only as a new entry is added (a notice, a
// tenure's end, a watch of a new thread), and only while the table holds
// 4,096 entries or more (1,024 for the watches): so an idle runtime keeps
// up to 4,095 entries of each until Close, and after a burst of more
// threads, what the burst left until new ones come
// (TestReviewH71SignalsFootprint: about 5,600 tenure ends and 600 watched
// records per runtime stayed after 11,050 threads went idle; sessions,
// lapse watch, tidy and given-up tables were empty).
//
// # Limits
//
// A Cancel reaches the run holding the thread when the owner handles the
// request, which may be a later run than the one holding it when Cancel was
// called. DropQueued is applied by the owner Cancel reached: if it dies or
// loses the thread before reaching the mark, the next owner runs the rest.
// Without a lease provider Cancel reaches only runs of its own process. A
// DropQueued request may reach an owner after its mark was read by an
// earlier tenure elsewhere: the done record keeps the newest 16 drop marks
// apart from its [DedupeEntries] signals, so the owner finds the mark read
// and drops nothing; a request older than half the owner's dedupe window
// (the mark's ID carries when Cancel made it) drops nothing either, since
// the record may have expired (TestDropRequestAfterMarkAgedOut). That rests
// on the processes' clocks agreeing within half the dedupe window, on
// every process of the thread using the same dedupe window (the owner
// judges by its own), and on no more than 16 later Cancels with
// DropQueued of the thread reaching the record first; past those, such a
// request drops what its tenure reads until the tenure ends.
//
// The done record keeps [DedupeEntries] IDs per thread: a duplicate sent after
// that many newer signals ran, or after the dedupe window, runs again. A
// wake notice whose signal fell out of the record is acked once one tenure
// of the process holding the notice, started after that process first
// received it, ends cleanly with the inbox drained (TestStaleNoticeAcked:
// acked about 0.6s after it was published, after 1 recovered tenure); on a
// pubsub without pubsub.DrainedDeleter, after ten such tenures. The
// process remembers when it first received each notice it has not acked
// (beyond 4,096 of them, entries older than 10 minutes are dropped). Without a lease provider, deduplication
// is per process.
//
// While another process holds a thread, a runtime holding wake notices of
// it checks it (done record, acquire: up to two round trips) at most about
// once per notice as the notices first come, shared by the notices of the
// thread that come while one handler watches it (a steady stream of 240
// notices to 4 busy threads: 378 commands, TestStreamToBusyThreadChecks;
// 4,022 before the watch), and then about once per recovery interval per
// thread, however many of its notices it holds
// (TestBusyThreadNoticesCheckedPerThread). Each of those notices still
// comes back once per recovery interval (claimed again with the others due
// at the same time, in one pipeline) and is nacked without a round trip of
// its own. A notice whose signal is run within milliseconds costs its
// watcher one to three checks; in exchange it is acked soon after its
// signal is done, so notices do not queue behind handlers sleeping a
// recovery interval. A notice that arrived while another handler watched
// its thread and was nacked is acked when it comes back, a recovery
// interval later, if its signal is done by then: so up to a recovery
// interval of notices of busy threads stays pending in the work group.
//
// The lease is checked (its loss deadline included) right before the done
// record is written and the entry acked, and the record write is bounded by
// the loss deadline, so with a client that honours ctx deadlines it is sent
// only while the lease is held. The write itself is not fenced on the
// server: a write sent just before the deadline that Redis executes later
// (a network that delays rather than drops it) can still record the signal
// as done. The ack is decided (the inbox handler returns) before the
// deadline; the backend sends the XACK right after.
//
// Each active thread (a tenure in progress) holds one inbox subscription:
// its goroutines and, on redisstreams, one consumer of the inbox group, but
// no connection (pubsub.ReadOnDemand). On a pubsub without
// pubsub.ReadOnDemand, such as one wrapped by a layer that does not pass
// pubsub.Kicker on, each inbox subscription reads as the backend always
// does (on redisstreams: no connection of its own either, but an
// XREADGROUP each time the Backend's shared reader sees a new entry on the
// inbox, and the inbox in that reader's XREAD, which grows with the
// threads active at once). A wrapper that passes on neither
// pubsub.BatchPublisher nor pubsub.GroupPublisher makes inbox publishes
// plain: then keep the retention large (the default 100,000), or an inbox
// could be trimmed before its first tenure subscribed. One that does not
// pass on pubsub.BatchPublisher costs Send a round trip more (the inbox
// entry and the notice one after the other).
//
// Every runtime sees every wake notice (the fan-out watch): with many
// runtimes on one work topic, each reads the notices of all.
package signals
