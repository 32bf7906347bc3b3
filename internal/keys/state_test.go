package keys

import "testing"

func TestLeaseStateAndRevokedShareTheLeaseSlot(t *testing.T) {
	s, err := NewSpace("")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "thread:42", "{x}", "}{", "a\x00b", "signals.thread.t-1"} {
		lease := s.Lease(name)
		for _, k := range []string{s.LeaseState(name), s.LeaseRevoked(name), s.LeaseRevokeCall(name, "n1")} {
			if Slot(lease) != Slot(k) {
				t.Errorf("name %q: lease %q slot %d, %q slot %d", name, lease, Slot(lease), k, Slot(k))
			}
			if _, ok := s.ParseLease(k); ok {
				t.Errorf("ParseLease(%q) accepted a state key: ListLeases would list it", k)
			}
		}
	}
}
