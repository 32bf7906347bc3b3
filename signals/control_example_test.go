package signals_test

import (
	"context"
	"fmt"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/signals"
)

func ExampleRuntime_Cancel() {
	b := inmem.New()
	defer b.Close()
	running, stopped := make(chan struct{}), make(chan string)
	agent := func(ctx context.Context, run *signals.Run) error {
		if run.Signals[0].ID == "long" {
			close(running)
			<-ctx.Done() // a long model call, say
			stopped <- context.Cause(ctx).Error()
			return nil
		}
		stopped <- "ran " + run.Signals[0].ID
		return nil
	}
	rt, err := signals.New(b, agent)
	if err != nil {
		panic(err)
	}
	defer rt.Close(context.Background())
	ctx := context.Background()
	_, _ = rt.Send(ctx, "chat-1", signals.Signal{ID: "long", Type: "user.message"})
	_, _ = rt.Send(ctx, "chat-1", signals.Signal{ID: "next", Type: "user.message"})
	<-running
	st, _ := rt.Status(ctx, "chat-1")
	fmt.Println("queued:", st.Queued)
	// Any process sharing the backend may call Cancel; it reaches the owner.
	res, err := rt.Cancel(ctx, "chat-1", "user pressed stop")
	fmt.Println("cancelled:", res.Cancelled, err)
	fmt.Println(<-stopped)
	fmt.Println(<-stopped) // the queued signal runs next
	// Output:
	// queued: 1
	// cancelled: true <nil>
	// signals: run of thread "chat-1" cancelled: user pressed stop
	// ran next
}
