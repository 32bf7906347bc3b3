package redisstreams

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasebus/leasebus/pubsub"
)

// Stream entry layout, version 1. Every field value is the raw bytes of the
// Event field (binary-safe), except meta (a JSON object of strings) and
// created (Unix nanoseconds in decimal). Absent optional fields mean empty:
// no run, nil data, nil metadata, zero CreatedAt.
const (
	codecVersion = "1"

	fieldVersion = "v"
	fieldID      = "id"
	fieldType    = "type"
	fieldRun     = "run"
	fieldData    = "data"
	fieldMeta    = "meta"
	fieldCreated = "created"
)

// undecodableType is the Type of the dead letter written for a stream entry
// that could not be decoded; its Data is a JSON object of the raw fields.
const undecodableType = "leasebus.undecodable"

// metaDeadStreamID holds the stream entry id of a dead-lettered entry.
const metaDeadStreamID = "leasebus.dead.stream_id"

// errDecode is wrapped by every decode error.
var errDecode = errors.New("redisstreams: undecodable stream entry")

// minCreated and maxCreated bound the CreatedAt an entry can carry, in Unix
// nanoseconds (1677-09-21 to 2262-04-11).
var (
	minCreated = time.Unix(0, math.MinInt64).UTC()
	maxCreated = time.Unix(0, math.MaxInt64).UTC()
)

// encodeEvent returns the XADD field/value list of e and its size in bytes
// (the sum of the lengths of names and values). Metadata must be valid UTF-8,
// as it travels as JSON, and CreatedAt within minCreated and maxCreated;
// anything else is an error wrapping pubsub.ErrInvalid.
func encodeEvent(e pubsub.Event) ([]string, int, error) {
	fields := make([]string, 0, 14)
	fields = append(fields, fieldVersion, codecVersion, fieldID, e.ID, fieldType, e.Type)
	if e.RunID != "" {
		fields = append(fields, fieldRun, e.RunID)
	}
	if e.Data != nil {
		fields = append(fields, fieldData, string(e.Data))
	}
	if len(e.Metadata) > 0 {
		for k, v := range e.Metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, 0, fmt.Errorf("%w: metadata %q=%q is not valid UTF-8 (event id %q)", pubsub.ErrInvalid, k, v, e.ID)
			}
		}
		m, err := json.Marshal(e.Metadata)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: metadata of event %q: %v", pubsub.ErrInvalid, e.ID, err)
		}
		fields = append(fields, fieldMeta, string(m))
	}
	if !e.CreatedAt.IsZero() {
		if e.CreatedAt.Before(minCreated) || e.CreatedAt.After(maxCreated) {
			// UnixNano is undefined there: it would come back as another
			// time (review h59: 2300 as 1715).
			return nil, 0, fmt.Errorf("%w: CreatedAt %v of event %q is outside %v to %v (Unix nanoseconds)",
				pubsub.ErrInvalid, e.CreatedAt, e.ID, minCreated, maxCreated)
		}
		fields = append(fields, fieldCreated, strconv.FormatInt(e.CreatedAt.UnixNano(), 10))
	}
	size := 0
	for _, f := range fields {
		size += len(f)
	}
	return fields, size, nil
}

// decodeEvent reads an Event from the fields of a stream entry as go-redis
// returns them. DeliveryAttempt is left 0. Unknown fields are ignored, so a
// later minor version may add some; a different version is an error.
func decodeEvent(values map[string]any) (pubsub.Event, error) {
	str := func(name string) (string, bool, error) {
		v, ok := values[name]
		if !ok {
			return "", false, nil
		}
		s, ok := v.(string)
		if !ok {
			return "", true, fmt.Errorf("%w: field %q is %T, not a string", errDecode, name, v)
		}
		return s, true, nil
	}
	var e pubsub.Event
	v, ok, err := str(fieldVersion)
	if err != nil {
		return e, err
	}
	if !ok {
		return e, fmt.Errorf("%w: no %q field (not written by leasebus)", errDecode, fieldVersion)
	}
	if v != codecVersion {
		return e, fmt.Errorf("%w: version %q, want %q", errDecode, v, codecVersion)
	}
	if e.ID, _, err = str(fieldID); err != nil {
		return e, err
	}
	if e.ID == "" {
		return e, fmt.Errorf("%w: empty %q field", errDecode, fieldID)
	}
	if e.Type, _, err = str(fieldType); err != nil {
		return e, err
	}
	if e.Type == "" {
		return e, fmt.Errorf("%w: empty %q field", errDecode, fieldType)
	}
	if e.RunID, _, err = str(fieldRun); err != nil {
		return e, err
	}
	data, ok, err := str(fieldData)
	if err != nil {
		return e, err
	}
	if ok {
		e.Data = json.RawMessage(data)
		if e.Data == nil {
			e.Data = json.RawMessage{}
		}
	}
	meta, ok, err := str(fieldMeta)
	if err != nil {
		return e, err
	}
	if ok {
		if e.Metadata, err = decodeMeta(meta); err != nil {
			return pubsub.Event{}, fmt.Errorf("%w: field %q: %v", errDecode, fieldMeta, err)
		}
		if len(e.Metadata) == 0 {
			e.Metadata = nil
		}
	}
	created, ok, err := str(fieldCreated)
	if err != nil {
		return e, err
	}
	if ok {
		n, err := strconv.ParseInt(created, 10, 64)
		if err != nil {
			return pubsub.Event{}, fmt.Errorf("%w: field %q: %v", errDecode, fieldCreated, err)
		}
		e.CreatedAt = time.Unix(0, n)
	}
	return e, nil
}

// rawFieldsJSON returns the fields of an undecodable entry as a JSON object
// of strings (non-string values are formatted with %v).
func rawFieldsJSON(values map[string]any) json.RawMessage {
	m := make(map[string]string, len(values))
	for k, v := range values {
		if s, ok := v.(string); ok {
			m[k] = s
		} else {
			m[k] = fmt.Sprint(v)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// validMetadata returns e with its metadata made valid UTF-8 (invalid bytes
// become U+FFFD), which encodeEvent requires. Dead letters go through it:
// their topic and reason may hold any bytes.
func validMetadata(e pubsub.Event) pubsub.Event {
	valid := true
	for k, v := range e.Metadata {
		valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
	}
	if valid {
		return e
	}
	m := make(map[string]string, len(e.Metadata))
	for k, v := range e.Metadata {
		m[strings.ToValidUTF8(k, "\uFFFD")] = strings.ToValidUTF8(v, "\uFFFD")
	}
	e.Metadata = m
	return e
}

// undecodableEvent returns the dead letter of a stream entry of topic that
// could not be decoded. Its ID is derived from the entry id, so that a
// dead letter written twice (by two readers, or after a crash) can be
// deduplicated.
func undecodableEvent(topic, entryID string, values map[string]any, reason error) pubsub.Event {
	e := pubsub.Event{
		ID:        "undecodable:" + entryID,
		Type:      undecodableType,
		Data:      rawFieldsJSON(values),
		CreatedAt: time.Now(),
		Metadata:  map[string]string{metaDeadStreamID: entryID},
	}
	return validMetadata(pubsub.DeadLetter(e, topic, reason.Error(), 1))
}

// cloneEvent returns a copy of e that shares no mutable memory with it.
func cloneEvent(e pubsub.Event) pubsub.Event {
	if e.Data != nil {
		e.Data = append(json.RawMessage{}, e.Data...)
	}
	if e.Metadata != nil {
		e.Metadata = maps.Clone(e.Metadata)
	}
	return e
}

// streamID is a parsed stream entry id, ms-seq.
type streamID struct{ ms, seq uint64 }

// parseStreamID parses "ms-seq" (or "ms"); ok is false for anything else.
func parseStreamID(s string) (streamID, bool) {
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return streamID{}, false
	}
	var seq uint64
	if hasSeq {
		if seq, err = strconv.ParseUint(seqPart, 10, 64); err != nil {
			return streamID{}, false
		}
	}
	return streamID{ms, seq}, true
}

// compareStreamIDs orders two entry ids as Redis does; an unparsable id
// sorts first.
func compareStreamIDs(a, b string) int {
	x, okA := parseStreamID(a)
	y, okB := parseStreamID(b)
	switch {
	case !okA && !okB:
		return strings.Compare(a, b)
	case !okA:
		return -1
	case !okB:
		return 1
	case x.ms != y.ms:
		if x.ms < y.ms {
			return -1
		}
		return 1
	case x.seq != y.seq:
		if x.seq < y.seq {
			return -1
		}
		return 1
	}
	return 0
}

// decodeMeta decodes the metadata field, a JSON object of strings. The
// object encodeEvent writes (json.Marshal of a map[string]string: no
// whitespace, strings without escapes in the common case) is parsed
// directly, without reflection; anything else (an escape, whitespace,
// another JSON type, invalid UTF-8, bad syntax) goes to json.Unmarshal, so
// the result is always json.Unmarshal's (FuzzDecodeMeta checks it).
func decodeMeta(s string) (map[string]string, error) {
	if m, ok := decodeMetaFast(s); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeMetaFast parses s when it is {"k":"v",...} with no whitespace and
// no backslash or control character in any string; ok is false otherwise.
func decodeMetaFast(s string) (m map[string]string, ok bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' || !utf8.ValidString(s) {
		return nil, false
	}
	body := s[1 : len(s)-1]
	m = make(map[string]string, strings.Count(body, `":"`))
	// str reads a string at the start of rest: its contents and what
	// follows the closing quote.
	str := func(rest string) (string, string, bool) {
		if len(rest) == 0 || rest[0] != '"' {
			return "", "", false
		}
		for i := 1; i < len(rest); i++ {
			switch c := rest[i]; {
			case c == '"':
				return rest[1:i], rest[i+1:], true
			case c == '\\' || c < 0x20:
				return "", "", false
			}
		}
		return "", "", false
	}
	for rest := body; rest != ""; {
		k, after, ok := str(rest)
		if !ok || len(after) == 0 || after[0] != ':' {
			return nil, false
		}
		v, after, ok := str(after[1:])
		if !ok {
			return nil, false
		}
		m[k] = v
		switch {
		case after == "":
			rest = ""
		case after[0] == ',' && len(after) > 1:
			rest = after[1:]
		default:
			return nil, false
		}
	}
	return m, true
}
