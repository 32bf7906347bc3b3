// Command leasebus is the operator tool of leasebus: it shows the library's
// guarantees at work and lets you look into a running deployment.
//
// Usage:
//
//	leasebus <command> [flags] [arguments]
//
// The commands are:
//
//	demo      start several worker processes that share one Redis, send
//	          signals to a few threads from all of them, SIGKILL the owner of
//	          a thread in the middle of a run, then draw a per-thread
//	          timeline (who owned which thread when, hand-offs, the takeover
//	          after the kill) and check the events the workers recorded:
//	          one owner at a time, every signal run, gap-free hand-offs, the
//	          takeover after the kill. It stops as soon as every signal ran
//	          (a few seconds) and exits 1 when a guarantee broke.
//	leases    list live leases: key, holder, fencing token, time left
//	          (--prefix to filter, --watch to refresh); leases revoke KEY
//	          --reason R takes a lease away from its holder (lease.Revoker):
//	          only the tenure it reads (or --token names).
//	threads   list the threads some process holds: owning process and run,
//	          fencing token, time left, signals queued and in flight
//	          (--watch to refresh), and the threads no process holds whose
//	          signals still wait in their inbox (an owner that died, no
//	          runtime up to take them over); threads cancel THREAD cancels
//	          the run holding it, wherever it runs (signals.Runtime.Cancel).
//	tail      print the events of a topic as they arrive, one line each
//	          (time, id, type, data), until interrupted; --group G joins a
//	          consumer group the topic has (--create-group makes one,
//	          which stays and holds back the topic's trimming).
//	publish   publish one event to a topic (--type, --data JSON,
//	          --metadata k=v).
//	topics    topics delete TOPIC: delete a topic's stream with its events
//	          and consumer groups (pubsub.TopicDeleter); a topic that does
//	          not exist exits 1 unless --missing-ok.
//
// Every command takes --redis URL (default: the LEASEBUS_REDIS_URL
// environment variable) and --help. Without a Redis URL, demo starts an
// embedded Redis-protocol server (miniredis) on a loopback port, so it needs
// nothing installed; the other commands need a server to look at. The URL
// names one server: the URL of a Redis Cluster node is refused (exit 2,
// "... is a node of a Redis Cluster ..."), since a client of one node sees
// only that node's share of the keys; the command does not speak Cluster.
// Nor Sentinel: a Sentinel's URL is refused too (exit 2; give the master's).
// Connecting gives up after 3s; once connected, leases and threads (each
// --watch round), publish and topics delete wait at most --timeout
// (default 10s) for Redis, then exit 1 (a --watch round shows the error
// and the watch goes on).
//
// leasebus --version prints the version the binary was built from.
//
// Exit status: 0 on success, 1 when the demo found a broken guarantee or a
// command failed while running, 2 for invalid flags or arguments and for a
// Redis server that cannot be reached (errors are one line on stderr), 130
// when the demo was interrupted (Ctrl-C) before it finished.
package main
