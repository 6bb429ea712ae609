package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// RSSAnon and RSSFile split RSS into anonymous and file pages (RunIdle
	// only).
	RSSAnon, RSSFile int64
	// HeapInuse is the server's Go heap in use at the window's end
	// (go_memstats_heap_inuse_bytes of its /metrics; RunIdle only, 0 if
	// unread).
	HeapInuse int64
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
	if err := Sleep(ctx, warmup); err != nil {
		return nil, err
	}
	pid := srv.Pid()
	var out []IdleSample
	for range windows {
		// Each window starts after the last one's /metrics read, so that
		// the bench's own request is not counted as the server's idle CPU.
		before, err := CPUTime(pid)
		if err != nil {
			return out, err
		}
		t0 := time.Now()
		if err := Sleep(ctx, window); err != nil {
			return out, err
		}
		after, err := CPUTime(pid)
		if err != nil {
			return out, err
		}
		elapsed := time.Since(t0)
		rss, err := RSS(pid)
		if err != nil {
			return out, err
		}
		anon, file, err := RSSParts(pid)
		if err != nil {
			return out, err
		}
		heap, err := heapInuse(ctx, cs)
		if err != nil {
			return out, err
		}
		out = append(out, IdleSample{CPU: after - before, Window: elapsed, RSS: rss, RSSAnon: anon, RSSFile: file, HeapInuse: heap})
	}
	return out, nil
}

// Sleep waits d, or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// heapInuse reads go_memstats_heap_inuse_bytes from the server's /metrics.
func heapInuse(ctx context.Context, cs kubernetes.Interface) (int64, error) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("cluster: reading /metrics: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, errors.New("cluster: /metrics has no go_memstats_heap_inuse_bytes")
}
