package childproc

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/rs/zerolog"
)

// maxLine bounds a line kept in memory until its newline comes.
const maxLine = 1 << 20

// lineLog logs what a child writes: its JSON log lines (zerolog's) at
// their own level with their own fields, any other line as an error (a
// Go runtime's crash report is such lines).
type lineLog struct {
	log     zerolog.Logger
	partial []byte
	// notices are the messages noticed records when a line has one.
	notices []string
	noticed string
}

func (c *lineLog) Write(p []byte) (int, error) {
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		c.line(c.partial[:i])
		c.partial = c.partial[i+1:]
	}
	if len(c.partial) > maxLine {
		c.flush()
	}
	c.partial = bytes.Clone(c.partial) // let the written lines go
	return len(p), nil
}

// flush logs a last line that had no newline.
func (c *lineLog) flush() {
	if len(c.partial) > 0 {
		c.line(c.partial)
		c.partial = nil
	}
}

func (c *lineLog) line(b []byte) {
	b = bytes.TrimRight(b, "\r")
	if len(b) == 0 {
		return
	}
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&fields) != nil || fields == nil || dec.More() {
		c.log.Error().Msg(string(b))
		return
	}
	level, _ := fields[zerolog.LevelFieldName].(string)
	msg, _ := fields[zerolog.MessageFieldName].(string)
	if slices.Contains(c.notices, msg) {
		c.noticed = msg
	}
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	// This process's logger stamps its own time.
	delete(fields, zerolog.LevelFieldName)
	delete(fields, zerolog.MessageFieldName)
	delete(fields, zerolog.TimestampFieldName)
	c.log.WithLevel(lvl).Fields(fields).Msg(msg)
}
