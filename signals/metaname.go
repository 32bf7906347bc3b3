package signals

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// metaBytesMark starts a notice or control metadata value that carries a
// user-given name (thread, signal ID, process, owner, cancel reason) which
// is not valid UTF-8, base64-encoded after the mark. A backend may require
// metadata to be UTF-8 (redisstreams carries it as JSON), while a name may
// hold any bytes (DESIGN): before, Send to such a thread, or with such a
// signal ID, failed on redisstreams after its acquire (review h59). A name
// that is valid UTF-8 travels as itself, unless it starts with the mark.
const metaBytesMark = "\x00b64:"

// metaName returns the metadata value that carries name.
func metaName(name string) string {
	if utf8.ValidString(name) && !strings.HasPrefix(name, metaBytesMark) {
		return name
	}
	return metaBytesMark + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// nameOf returns the name md[key] carries (see metaName); a value that
// starts with the mark and does not decode is returned as it is.
func nameOf(md map[string]string, key string) string {
	v := md[key]
	rest, ok := strings.CutPrefix(v, metaBytesMark)
	if !ok {
		return v
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return v
	}
	return string(b)
}

// noticeMeta returns the metadata of a wake notice of signal id on thread.
func noticeMeta(thread, id string) map[string]string {
	return map[string]string{metaThread: metaName(thread), metaSignal: metaName(id)}
}
