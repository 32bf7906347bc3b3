//go:build noleasebus

package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// leasebusMissing says why the leasebus contenders are absent.
const leasebusMissing = "built with -tags noleasebus"

const (
	nameLeasebusKeeper = "leasebus Keeper"
	hasKeeper          = false
)

func benchKeeperRenew(context.Context, config, *redis.Client) (time.Duration, error) {
	return 0, errNotReady
}

func leasebusPubSub() []pubsubContender { return nil }
func leasebusLocks() []lockContender    { return nil }
