package signals_test

import (
	"context"

	"github.com/leasebus/leasebus/signals"
)

// eachSignal gives take every signal of run, the first ones (run.Signals)
// and then each follow-up from run.Next until it reports none: the loop of
// an agent that handles its signals one at a time.
func eachSignal(ctx context.Context, run *signals.Run, take func(signals.Signal)) error {
	for _, s := range run.Signals {
		take(s)
	}
	for {
		s, ok := run.Next(ctx)
		if !ok {
			return nil
		}
		take(s)
	}
}
