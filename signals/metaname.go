package signals

import (
	"encoding/base64"
	"unicode/utf8"
)

// metaBytesSuffix names, after a notice or control metadata key, the key
// that carries a user-given name (thread, signal ID, process, owner, cancel
// reason) which is not valid UTF-8, base64-encoded. A backend may require
// metadata to be UTF-8 (redisstreams carries it as JSON), while a name may
// hold any bytes (DESIGN): before, Send to such a thread, or with such a
// signal ID, failed on redisstreams after its acquire (review h59).
//
// A name that is valid UTF-8 travels as itself under its own key, whatever
// it holds: a value is never decoded, so no valid name can be read as
// another one. Review h61: with a mark at the start of the value instead
// ("\x00b64:"), a runtime of this version decoded the thread id
// "\x00b64:YWJj" of an older process's notice as "abc", whose empty tenure
// acked the notice, and the signal never ran
// (TestReviewH61MarkPrefixedThreadFromOldProcess).
const metaBytesSuffix = ".b64"

// putName stores name in md under key: as itself when it is valid UTF-8,
// else base64-encoded under key+metaBytesSuffix.
func putName(md map[string]string, key, name string) {
	if utf8.ValidString(name) {
		md[key] = name
		return
	}
	md[key+metaBytesSuffix] = base64.RawURLEncoding.EncodeToString([]byte(name))
}

// copyName copies the name under key from src to dst as it travels.
func copyName(dst, src map[string]string, key string) {
	if v, ok := src[key+metaBytesSuffix]; ok {
		dst[key+metaBytesSuffix] = v
		return
	}
	dst[key] = src[key]
}

// nameOf returns the name stored in md under key (see putName); an encoded
// value that does not decode counts as absent.
func nameOf(md map[string]string, key string) string {
	if v, ok := md[key+metaBytesSuffix]; ok {
		if b, err := base64.RawURLEncoding.DecodeString(v); err == nil {
			return string(b)
		}
	}
	return md[key]
}

// noticeMeta returns the metadata of a wake notice of signal id on thread.
func noticeMeta(thread, id string) map[string]string {
	md := make(map[string]string, 4)
	putName(md, metaThread, thread)
	putName(md, metaSignal, id)
	return md
}
