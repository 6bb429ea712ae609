package kubeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// The wait before kube-proxy starts again doubles from firstRestartDelay
// to maxRestartDelay, and is back to the first once it has run longer
// than the last.
var (
	firstRestartDelay = time.Second
	maxRestartDelay   = time.Minute
)

// stopTimeout is how long a child has after SIGTERM before it is killed.
const stopTimeout = 10 * time.Second

// supervise runs argv as a child process until ctx ends, starting it
// again whenever it exits.
func supervise(ctx context.Context, argv []string, log zerolog.Logger) {
	log = log.With().Str("process", "kube-proxy").Logger()
	delay := firstRestartDelay
	for {
		started := time.Now()
		err := runChild(ctx, argv, log)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > maxRestartDelay {
			delay = firstRestartDelay
		}
		log.Error().Err(err).Dur("restartIn", delay).Msg("kube-proxy exited; starting it again")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, maxRestartDelay)
	}
}

// runChild runs argv until it exits, or until ctx ends (then it stops it).
func runChild(ctx context.Context, argv []string, log zerolog.Logger) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopTimeout
	// The child must not outlive this process (SIGKILL, a crash).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out := &childLog{log: log}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	log.Info().Int("pid", cmd.Process.Pid).Msg("kube-proxy started")
	err := cmd.Wait()
	out.flush()
	if err == nil {
		err = fmt.Errorf("exited with status 0")
	}
	return err
}

// maxLine bounds a line kept in memory until its newline comes.
const maxLine = 1 << 20

// childLog logs what a child writes: its JSON log lines (zerolog's) at
// their own level with their own fields, any other line as an error (a
// Go runtime's crash report is such lines).
type childLog struct {
	log     zerolog.Logger
	partial []byte
}

func (c *childLog) Write(p []byte) (int, error) {
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
func (c *childLog) flush() {
	if len(c.partial) > 0 {
		c.line(c.partial)
		c.partial = nil
	}
}

func (c *childLog) line(b []byte) {
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
