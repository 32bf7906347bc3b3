//go:build noleasebus || nosignals

package main

import "context"

// signals would measure the leasebus signals runtime; this build leaves it out.
func (r *runner) signals(context.Context) {
	r.notes = append(r.notes, "signals Forwarded latency left out: built with -tags noleasebus or nosignals")
}
