package changeset

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"
)

// A replayed launch (the launch cache: internal/backend/native/initc/
// launch.c) creates a run's changeset without Go, so it cannot marshal
// Meta. It writes meta.json as ReplayMeta does: a head it makes itself
// (the id, the time and the command line's command, compact) and a tail
// that the recorded run took from ReplayTail. This file is the one
// definition of that format; replay_linux_test.go checks launch.c's
// output against it.

// replayTime is how a replay writes Meta.Created: always nine digits.
const replayTime = "2006-01-02T15:04:05.000000000Z"

// replayTailStart is what launch.c expects after the command array.
const replayTailStart = ",\n  \"workspace\": "

// ReplayMeta is meta.json of m, a changeset just created for a run (status
// running), as a replay writes it.
func ReplayMeta(m *Meta) ([]byte, error) {
	tail, err := ReplayTail(m)
	if err != nil {
		return nil, err
	}
	return append(replayHead(m.ID, m.Created, m.Command), tail...), nil
}

// replayHead is meta.json up to the end of the command array.
func replayHead(id string, created time.Time, command []string) []byte {
	b := []byte("{\n  \"id\": ")
	b = appendReplayString(b, id)
	b = append(b, ",\n  \"created\": \""...)
	b = created.UTC().AppendFormat(b, replayTime)
	b = append(b, "\",\n  \"command\": ["...)
	for i, a := range command {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendReplayString(b, a)
	}
	return append(b, ']')
}

// appendReplayString appends s as a JSON string as launch.c's jsonstr
// does: only quotes, backslashes and control bytes are escaped.
func appendReplayString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ReplayTail is meta.json of m after its command array, from the comma
// before "workspace" to the end, for a replay to write after a head of
// its own. It fails for a record a replay could not make (m must be a
// running changeset) or one that would not read back as m.
func ReplayTail(m *Meta) (string, error) {
	if m.Status != StatusRunning || !m.Finished.IsZero() || m.Counts != nil || len(m.ID) != idLen {
		return "", errors.New("not the record of a changeset just created")
	}
	t := *m
	t.Command = nil
	data, err := json.MarshalIndent(&t, "", "  ")
	if err != nil {
		return "", err
	}
	i := bytes.Index(data, []byte(`"command": null`))
	if i < 0 {
		return "", errors.New("meta.json has no command")
	}
	tail := string(data[i+len(`"command": null`):]) + "\n"
	if len(tail) < len(replayTailStart) || tail[:len(replayTailStart)] != replayTailStart {
		return "", errors.New("meta.json has members after its command that a replay does not write")
	}
	// Read back as launch.c's record will be, it must be m.
	var got Meta
	if json.Unmarshal(append(replayHead(m.ID, m.Created, m.Command), tail...), &got) != nil {
		return "", errors.New("a replayed meta.json would not parse")
	}
	if !got.Created.Equal(m.Created) {
		return "", errors.New("a replayed meta.json would not keep its time")
	}
	got.Created = m.Created
	a, err1 := json.Marshal(&got)
	b, err2 := json.Marshal(m)
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		return "", errors.New("a replayed meta.json would not read back the same")
	}
	return tail, nil
}
