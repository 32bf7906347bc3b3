//go:build noleasebus

package main

// leasebusMissing says why the leasebus contenders are absent.
const leasebusMissing = "built with -tags noleasebus"

func leasebusPubSub() []pubsubContender { return nil }
func leasebusLocks() []lockContender    { return nil }
