package keys

import "testing"

func TestLeaseStateSharesTheLeaseSlot(t *testing.T) {
	s, err := NewSpace("")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "thread:42", "{x}", "}{", "a\x00b", "signals.thread.t-1"} {
		lease, state := s.Lease(name), s.LeaseState(name)
		if Slot(lease) != Slot(state) {
			t.Errorf("name %q: lease %q slot %d, state %q slot %d", name, lease, Slot(lease), state, Slot(state))
		}
		if _, ok := s.ParseLease(state); ok {
			t.Errorf("ParseLease(%q) accepted a state key: ListLeases would list it", state)
		}
	}
}
