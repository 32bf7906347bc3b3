package redisstreams

import (
	"fmt"
	"testing"
)

// TestLanesBounded: a lanes makes one combiner per name, the same one for
// the same name, at most maxLanes of them; the zero lane serves "" and
// every name beyond the bound.
func TestLanesBounded(t *testing.T) {
	var l lanes[*leaseCall]
	if l.lane("") != &l.one {
		t.Fatal(`lane("") is not the zero lane`)
	}
	made := map[*combiner[*leaseCall]]bool{}
	for i := range maxLanes {
		c := l.lane(fmt.Sprint("10.0.0.", i, ":6379"))
		if c == &l.one || made[c] {
			t.Fatalf("lane %d: the zero lane or another name's", i)
		}
		made[c] = true
		if l.lane(fmt.Sprint("10.0.0.", i, ":6379")) != c {
			t.Fatalf("lane %d: a second combiner for the same name", i)
		}
	}
	if c := l.lane("10.0.1.0:6379"); c != &l.one {
		t.Fatal("a name beyond maxLanes did not get the zero lane")
	}
	if n := l.count(); n != maxLanes {
		t.Fatalf("count %d, want %d", n, maxLanes)
	}
	l.wait() // no leader runs: returns at once
}
