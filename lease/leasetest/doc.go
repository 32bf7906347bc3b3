// Package leasetest is the conformance suite of the lease contract: every
// lease.Provider in leasebus runs it, and so can any custom backend.
//
//	func TestLease(t *testing.T) {
//		leasetest.Run(t, leasetest.Config{
//			New: func(t *testing.T) lease.Provider {
//				b := mybackend.New()
//				t.Cleanup(func() { b.Close() })
//				return b
//			},
//		})
//	}
//
// Each rule of the contract (see package lease) is one named subtest, so a
// failure names the rule that broke. The optional capabilities lease.Inspector,
// lease.BatchRenewer and lease.Revoker have subtests of their own, which skip,
// naming the capability, when the provider lacks it; no other subtest skips.
package leasetest
