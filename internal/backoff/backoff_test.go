package backoff

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPolicyDelay(t *testing.T) {
	p := Policy{Min: 10 * time.Millisecond, Max: time.Second}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for n, w := range want {
		if got := p.Delay(n); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := p.Delay(1 << 30); got != time.Second {
		t.Errorf("Delay(1<<30) = %v, want the cap 1s", got)
	}
	if got := (Policy{Min: 3 * time.Second, Max: time.Second}).Delay(4); got != 3*time.Second {
		t.Errorf("Max below Min: Delay(4) = %v, want Min 3s", got)
	}
	if got := (Policy{Max: time.Second}).Delay(5); got != 0 {
		t.Errorf("zero Min: Delay(5) = %v, want 0", got)
	}
	huge := Policy{Min: time.Duration(1) << 61, Max: time.Duration(1<<63 - 1)}
	if got := huge.Delay(10); got <= 0 {
		t.Errorf("Delay near the top of Duration overflowed: %v", got)
	}
}

func TestPolicyJitterInUpperHalf(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: 400 * time.Millisecond, Jitter: true}
	for n := range 5 {
		full := Policy{Min: p.Min, Max: p.Max}.Delay(n)
		for range 200 {
			d := p.Delay(n)
			if d < full/2 || d > full {
				t.Fatalf("Delay(%d) = %v, want in [%v, %v]", n, d, full/2, full)
			}
		}
	}
}

func TestBackoffNextReset(t *testing.T) {
	b := Backoff{Policy: Policy{Min: time.Millisecond, Max: 4 * time.Millisecond}}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{1, 2, 4, 4, 4}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != time.Millisecond {
		t.Errorf("Next after Reset = %v, want 1ms", d)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled ctx = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Sleep on a cancelled ctx took %v", d)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Errorf("Sleep(0) = %v, want nil", err)
	}
}
