package pubsub

// Unwrapper is implemented by a PubSub that wraps another one (an
// instrumentation layer, say): Unwrap returns the wrapped PubSub.
type Unwrapper interface {
	Unwrap() PubSub
}

// maxUnwrap bounds how many wrappers As looks through (a wrapper that
// returns itself, or a cycle, ends the search there).
const maxUnwrap = 16

// As finds the capability T (an interface such as DrainedDeleter or
// BacklogReader) on ps or, through Unwrapper, on the PubSub it wraps, and
// so on down, the way errors.As walks wrapped errors: a wrapper need not
// pass on every optional capability of what it wraps. Calls made through
// what As returns from a wrapped PubSub bypass the wrappers above it. As
// returns false when ps is nil or no layer has T; it looks through at most
// 16 layers.
func As[T any](ps PubSub) (T, bool) {
	for range maxUnwrap {
		if ps == nil {
			break
		}
		if c, ok := ps.(T); ok {
			return c, true
		}
		u, ok := ps.(Unwrapper)
		if !ok {
			break
		}
		ps = u.Unwrap()
	}
	var zero T
	return zero, false
}
