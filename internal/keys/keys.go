package keys

import (
	"errors"
	"fmt"
	"strings"
)

// Escape returns name with '%', '{' and '}' percent-encoded. Callers reject
// empty names before building keys: an empty hash tag would be ignored by
// Cluster.
func Escape(name string) string {
	n := 0
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '%', '{', '}':
			n++
		}
	}
	if n == 0 {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 2*n)
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '%', '{', '}':
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

// ErrMalformed is returned by Unescape for text that Escape cannot produce.
var ErrMalformed = errors.New("keys: malformed escaped name")

// Unescape reverses Escape.
func Unescape(s string) (string, error) {
	if !strings.ContainsAny(s, "%{}") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '{', '}':
			return "", fmt.Errorf("%w: %q", ErrMalformed, s)
		case '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("%w: %q", ErrMalformed, s)
			}
			switch s[i+1 : i+3] {
			case "25":
				b.WriteByte('%')
			case "7B":
				b.WriteByte('{')
			case "7D":
				b.WriteByte('}')
			default:
				return "", fmt.Errorf("%w: %q", ErrMalformed, s)
			}
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// Space is the key space of one leasebus deployment: every key starts with
// its prefix and a colon.
type Space struct{ prefix string }

// DefaultPrefix is the prefix of a Space made from "".
const DefaultPrefix = "leasebus"

// NewSpace returns the Space of prefix ("" means DefaultPrefix). The prefix
// must not hold '{', '}' or glob characters (*?[]\), which would change slots
// or listings.
func NewSpace(prefix string) (Space, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}*?[]\\") {
		return Space{}, fmt.Errorf("keys: prefix %q holds one of {}*?[]\\", prefix)
	}
	return Space{prefix: prefix}, nil
}

// Prefix returns the prefix of s.
func (s Space) Prefix() string { return s.prefix }

func (s Space) tagged(kind, name string) string {
	if kind == "" {
		return s.prefix + ":{" + Escape(name) + "}"
	}
	return s.prefix + ":" + kind + ":{" + Escape(name) + "}"
}

// Stream returns the stream key of topic: <prefix>:{<topic>}.
func (s Space) Stream(topic string) string { return s.tagged("", topic) }

// StreamMeta returns a per-topic key in the stream's slot, for state kept
// beside the stream (suffix names it): <prefix>:{<topic>}:<suffix>.
func (s Space) StreamMeta(topic, suffix string) string { return s.Stream(topic) + ":" + suffix }

// Lease returns the lease key of key: <prefix>:lease:{<key>}.
func (s Space) Lease(key string) string { return s.tagged("lease", key) }

// Fence returns the fencing counter key of key, in the lease key's slot:
// <prefix>:fence:{<key>}.
func (s Space) Fence(key string) string { return s.tagged("fence", key) }

// LeasePattern returns a SCAN MATCH pattern matching the lease keys of every
// lease key that starts with prefix.
func (s Space) LeasePattern(prefix string) string {
	return globEscape(s.prefix+":lease:{"+Escape(prefix)) + "*}"
}

// StreamPattern returns a SCAN MATCH pattern matching the stream keys of
// every topic that starts with prefix.
func (s Space) StreamPattern(prefix string) string {
	return globEscape(s.prefix+":{"+Escape(prefix)) + "*}"
}

// ParseLease returns the lease key encoded in redisKey, a key built by Lease.
func (s Space) ParseLease(redisKey string) (string, bool) {
	return s.parse("lease", redisKey)
}

// ParseStream returns the topic encoded in redisKey, a key built by Stream.
func (s Space) ParseStream(redisKey string) (string, bool) {
	return s.parse("", redisKey)
}

func (s Space) parse(kind, redisKey string) (string, bool) {
	head := s.prefix + ":{"
	if kind != "" {
		head = s.prefix + ":" + kind + ":{"
	}
	if !strings.HasPrefix(redisKey, head) || !strings.HasSuffix(redisKey, "}") {
		return "", false
	}
	name, err := Unescape(redisKey[len(head) : len(redisKey)-1])
	if err != nil {
		return "", false
	}
	return name, true
}

func globEscape(s string) string {
	if !strings.ContainsAny(s, "*?[]\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// HashTag returns the part of key that Redis Cluster hashes: the text between
// the first '{' and the next '}' when non-empty, else the whole key.
func HashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// Slot returns the Redis Cluster slot of key (CRC16/XMODEM of its hash tag,
// modulo 16384).
func Slot(key string) uint16 {
	return crc16(HashTag(key)) % 16384
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
