// Package pubsubtest is the conformance suite of package pubsub: every
// pubsub.PubSub backend runs [Run] from its tests, and so proves that it keeps
// each rule of the pubsub package documentation, one named subtest per rule.
//
// A backend's test is a few lines:
//
//	func TestPubSub(t *testing.T) {
//		pubsubtest.Run(t, pubsubtest.Config{
//			New:      func(t *testing.T) pubsub.PubSub { return mybackend.New(...) },
//			Features: pubsubtest.Features{ConsumerGroups: true, AckDeadline: true, Persistent: true},
//		})
//	}
//
// Features turn off the subtests of capabilities a backend does not have;
// those subtests are skipped with the reason, never passed silently. The
// suite waits on channels bounded by [Config.Timeout] and never takes a sleep
// as evidence; it does not check for leaked goroutines itself, so a backend's
// package should run goleak in its TestMain.
//
// The delivery policy ([pubsub.Policy]: panics, dead letters, the redelivery
// delay) is checked through the backend, so a backend that skips the Policy
// fails. A backend with a bounded shutdown ([Shutdowner]) has it checked
// too.
//
// Retention ("Retention" in package pubsub) is checked in two subtests:
// EarliestAfter10000Events (a group subscribing with StartFrom(Earliest)
// after 10,000 publishes gets all of them, with the backend's default
// retention, pubsub.DefaultRetention) and, when [Config.NewWithRetention] is
// set, RetentionNeverDropsUnacked (with [MinRetention], a group stuck on its
// first event and a group without a member receive every one of 2,010
// events). A backend implementing pubsub.TopicDeleter runs DeleteTopic;
// one implementing pubsub.BatchPublisher runs PublishBatchInOrder (with
// Config.NewWithRetention).
//
// [BenchPublish] and [BenchEndToEnd] give every backend the same benchmarks.
package pubsubtest
