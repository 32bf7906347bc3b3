// Command tourworker is the deployment that tour.sh looks into with
// "leasebus threads", "threads cancel" and "leases revoke": one signals
// runtime (process id "tour-agent") on --redis whose agent works on each
// signal until its run is cancelled (or a minute passed), with three
// signals sent to thread chat-42, and one application lease,
// jobs/nightly-report, kept with lease.Keep. It prints what its agent and
// its lease see, and runs until killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

func main() {
	url := flag.String("redis", "", "Redis URL")
	flag.Parse()
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, *url, redisstreams.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agent := func(ctx context.Context, run *signals.Run) error {
		s := run.Signals[0]
		fmt.Printf("agent: %s started %s (token %d)\n", run.Thread, s.ID, run.Token)
		select {
		case <-ctx.Done():
			fmt.Printf("agent: %s stopped %s: %v\n", run.Thread, s.ID, context.Cause(ctx))
		case <-time.After(time.Minute):
		}
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithProcessID("tour-agent"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, id := range []string{"msg-1", "msg-2", "msg-3"} {
		if _, err := rt.Send(ctx, "chat-42", signals.Signal{ID: id, Type: "user.message"}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	h, err := lease.Keep(ctx, b, "jobs/nightly-report", "tour-agent", 15*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	<-h.Done()
	fmt.Printf("lease: jobs/nightly-report ended: %v\n", h.Err())
	select {}
}
