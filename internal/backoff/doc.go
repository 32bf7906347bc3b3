// Package backoff is the one retry delay and the one ctx-aware sleep of
// leasebus. Every retry loop of the module (lease.Wait, the redisstreams
// readers, acker and Flush, the redelivery of a nacked event, the signals
// wake-notice poll, the command's workers) takes its delays from [Policy] or
// [Backoff] and waits with [Sleep].
package backoff
