package signals_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/signals"
)

func ExampleNew() {
	b := inmem.New()
	defer b.Close()
	done := make(chan struct{})
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			fmt.Println("run got", s.Type, string(s.Data))
		}
		close(done)
		return nil
	}
	rt, err := signals.New(b, agent)
	if err != nil {
		panic(err)
	}
	defer rt.Close(context.Background())
	if _, err := rt.Send(context.Background(), "thread-1", signals.Signal{Type: "user.message", Data: []byte(`"hi"`)}); err != nil {
		panic(err)
	}
	<-done
	// Output: run got user.message "hi"
}

func ExampleRuntime_Send() {
	b := inmem.New()
	defer b.Close()
	ran := make(chan string, 3)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		for {
			s, ok := run.Next(ctx) // follow-ups sent while this run is going
			if !ok {
				return nil
			}
			ran <- s.ID
		}
	}
	rt, err := signals.New(b, agent, signals.WithLeaseTTL(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer rt.Close(context.Background())
	for _, id := range []string{"first", "second", "first"} { // the duplicate ID runs once
		acc, err := rt.Send(context.Background(), "thread-1", signals.Signal{ID: id, Type: "user.message"})
		if err != nil {
			panic(err)
		}
		_ = acc.Action // Woke for the first send, then Delivered
	}
	fmt.Println(<-ran, <-ran)
	// Output: first second
}
