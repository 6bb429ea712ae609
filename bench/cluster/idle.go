package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
)

// IdleSample is one window of an idle server.
type IdleSample struct {
	// CPU is the CPU time the server used in the window.
	CPU    time.Duration
	Window time.Duration
	// RSS is its resident set at the window's end, in bytes.
	RSS int64
}

// RunIdle starts `sqlkube server --fake-nodes nodes` (all controllers),
// waits until the nodes are Ready and then warmup, and measures windows
// consecutive windows of length window.
func (s Setup) RunIdle(ctx context.Context, nodes int, warmup, window time.Duration, windows int) ([]IdleSample, error) {
	srv, stop, err := s.server(ctx, "--fake-nodes", fmt.Sprint(nodes))
	if err != nil {
		return nil, err
	}
	defer stop()
	cfg, err := srv.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := WaitReadyNodes(ctx, cs, nodes); err != nil {
		return nil, err
	}
	if err := sleep(ctx, warmup); err != nil {
		return nil, err
	}
	pid := srv.Pid()
	var out []IdleSample
	before, err := CPUTime(pid)
	if err != nil {
		return nil, err
	}
	for range windows {
		t0 := time.Now()
		if err := sleep(ctx, window); err != nil {
			return out, err
		}
		after, err := CPUTime(pid)
		if err != nil {
			return out, err
		}
		rss, err := RSS(pid)
		if err != nil {
			return out, err
		}
		out = append(out, IdleSample{CPU: after - before, Window: time.Since(t0), RSS: rss})
		before = after
	}
	return out, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
