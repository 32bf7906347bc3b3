package ackhook

import (
	"context"
	"testing"
)

func TestHook(t *testing.T) {
	if From(context.Background()) != nil {
		t.Fatal("From: a hook in an empty ctx")
	}
	h := &Hook{}
	if From(With(context.Background(), h)) != h {
		t.Fatal("From does not return the hook With put in")
	}
	n := 0
	h.Add(func() { n++ })
	h.Add(func() { n += 10 })
	if n != 0 {
		t.Fatal("Add called f before Fire")
	}
	h.Fire()
	h.Fire()
	if n != 11 {
		t.Fatalf("after two Fires: %d, want each function called once (11)", n)
	}
	h.Add(func() { n += 100 })
	if n != 111 {
		t.Fatalf("Add after Fire: %d, want f called at once (111)", n)
	}
}
