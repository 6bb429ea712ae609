// Package testlog is a log destination for tests that wait for what a
// component logs: zerolog's JSON events, decoded, taken by message.
package testlog

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Timeout is how long Next waits for an event.
const Timeout = 30 * time.Second

// Events receives zerolog's events (one per Write) from any goroutine;
// one test goroutine takes them with Next.
type Events struct {
	ch chan map[string]any
	// pending are events received while Next looked for another: two
	// goroutines (a supervisor and the copy of its child's output, say)
	// may log in either order.
	pending []map[string]any
}

// New makes an Events that holds up to buffer events not yet received.
func New(buffer int) *Events { return &Events{ch: make(chan map[string]any, buffer)} }

func (e *Events) Write(p []byte) (int, error) {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		return 0, err
	}
	e.ch <- m
	return len(p), nil
}

// Next takes the first event, in the order they were logged, whose
// message contains msg and that no earlier Next took, waiting up to
// Timeout for it; events before it stay for later calls.
func (e *Events) Next(t testing.TB, msg string) map[string]any {
	t.Helper()
	for i, m := range e.pending {
		if matches(m, msg) {
			e.pending = append(e.pending[:i], e.pending[i+1:]...)
			return m
		}
	}
	timeout := time.After(Timeout)
	for {
		select {
		case m := <-e.ch:
			if matches(m, msg) {
				return m
			}
			e.pending = append(e.pending, m)
		case <-timeout:
			t.Fatalf("no log line with %q", msg)
		}
	}
}

// Close ends the events; All returns those not yet taken.
func (e *Events) Close() { close(e.ch) }

// All returns the events not taken by Next, in order, once Close was
// called.
func (e *Events) All() []map[string]any {
	all := e.pending
	e.pending = nil
	for m := range e.ch {
		all = append(all, m)
	}
	return all
}

func matches(m map[string]any, msg string) bool {
	s, _ := m["message"].(string)
	return strings.Contains(s, msg)
}

// Stopped ends a supervisor's test: it cancels the supervisor's context,
// checks that its Run (whose result done carries) returns nil within 30 s,
// and that the child whose start the event started logged (its "pid") is
// gone.
func Stopped(t testing.TB, cancel context.CancelFunc, done <-chan error, started map[string]any) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	pid, _ := started["pid"].(float64)
	if err := syscall.Kill(int(pid), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the child (pid %v) is still there: %v", pid, err)
	}
}
