// Package keys builds every Redis key leasebus uses, in one place, so that
// each multi-key script or transaction touches keys of one Cluster hash slot
// and no user-given name can change another name's slot, escape the prefix,
// or collide with another name.
//
// A user-given name (topic, lease key, thread) is escaped byte-wise: '%', '{'
// and '}' become %25, %7B and %7D. The escaped name holds no brace, so the
// hash tag of a key built from it is exactly the escaped name; the escaping is
// injective and prefix-preserving, so a listing by prefix can be done with
// a SCAN pattern over the escaped prefix.
package keys
