// Package childproc runs a component in a child process of the node
// agent and keeps it running: started again whenever it exits (after a
// delay that doubles up to a minute), stopped with SIGTERM when the
// agent's context ends, and killed with the agent if the agent dies
// first. What the child writes is logged again on the agent's logger.
//
// sqlkube runs kube-proxy and the kubelet this way: both end their
// process on some failures (os.Exit, klog.Fatal, a panic nothing
// recovers), counting on a supervisor to start them again, and the agent
// may be `sqlkube server`, which must not end with them.
package childproc

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Default restart delays and stop timeout.
const (
	DefaultFirstDelay  = time.Second
	DefaultMaxDelay    = time.Minute
	DefaultStopTimeout = 10 * time.Second
)

// Options say which child to run and how.
type Options struct {
	// Name names the child in log lines (the field process=Name).
	Name string
	// Argv is the program and its arguments. The program should write
	// its logs as JSON lines (zerolog's) to standard error: each is
	// logged again at its own level with its own fields; any other line
	// is logged as an error.
	Argv []string
	// Log gets the child's lines and the supervisor's own.
	Log zerolog.Logger
	// FirstDelay is the wait before the first restart (default
	// DefaultFirstDelay). It doubles at each restart up to MaxDelay
	// (default DefaultMaxDelay), and is back to FirstDelay once the
	// child has run longer than MaxDelay.
	FirstDelay, MaxDelay time.Duration
	// StopTimeout is how long the child has after SIGTERM before it is
	// killed (default DefaultStopTimeout).
	StopTimeout time.Duration
	// Notices are the messages with which the child says it ends on
	// purpose, to be started again with what changed (kube-proxy's
	// "NodeIPs changed for the node"). An exit after one is logged at
	// info level, with the notice as its reason; any other, as an error.
	Notices []string
}

// Supervise runs o.Argv as a child process until ctx ends, starting it
// again whenever it exits, and returns once the child has stopped.
func Supervise(ctx context.Context, o Options) {
	if o.FirstDelay <= 0 {
		o.FirstDelay = DefaultFirstDelay
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	log := o.Log.With().Str("process", o.Name).Logger()
	delay := o.FirstDelay
	for {
		started := time.Now()
		notice, err := run(ctx, o, log)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > o.MaxDelay {
			delay = o.FirstDelay
		}
		ev := log.Error()
		if notice != "" {
			ev = log.Info().Str("reason", notice)
		}
		ev.Err(err).Dur("restartIn", delay).Msg(o.Name + " exited; starting it again")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, o.MaxDelay)
	}
}

// run runs the child until it exits, or until ctx ends (then it stops it),
// and returns the last of o.Notices the child logged ("" for none).
func run(ctx context.Context, o Options, log zerolog.Logger) (string, error) {
	// The child gets its death signal when the thread that started it
	// ends, not the process (prctl PR_SET_PDEATHSIG). Go ends a thread
	// when a goroutine that locked it returns without unlocking, which
	// any library may do; this goroutine holds its thread until the
	// child is gone, so that thread ends only with the process.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	cmd := exec.CommandContext(ctx, o.Argv[0], o.Argv[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = o.StopTimeout
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The child must not outlive this process (SIGKILL, a crash).
		Pdeathsig: syscall.SIGTERM,
		// Its own process group: a terminal's ^C reaches this process
		// only, which stops the child itself.
		Setpgid: true,
	}
	out := &lineLog{log: log, notices: o.Notices}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	log.Info().Int("pid", cmd.Process.Pid).Msg(o.Name + " started")
	err := cmd.Wait()
	out.flush()
	if err == nil {
		err = fmt.Errorf("exited with status 0")
	}
	return out.noticed, err
}
