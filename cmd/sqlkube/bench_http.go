package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
)

// newBenchHTTPCommand is a small HTTP load generator, to measure Services
// from inside a node's network namespace (nsenter), where wrk may not be.
func newBenchHTTPCommand() *cobra.Command {
	var (
		url         string
		duration    time.Duration
		concurrency int
		firstOK     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "http --url URL",
		Short: "GET a URL from --concurrency workers for --duration (a new connection each time) and print requests/s and latency",
		Long: `http GETs --url as fast as --concurrency workers can, each request on a new
connection (as a Service's connection tracking sees a new client), for
--duration, and prints: requests/s, errors, p50 and p99 latency.

With --first-ok D it instead tries the URL every 5 ms (each try on a new
connection, given up after 50 ms) for up to D and prints the wall-clock time
(Unix nanoseconds) of the first 200 answer: when a Service created at a
known moment starts to answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				return errors.New("give --url")
			}
			out := cmd.OutOrStdout()
			if firstOK > 0 {
				at, err := firstAnswer(cmd.Context(), url, firstOK)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "first-ok %d\n", at.UnixNano())
				return nil
			}
			r := loadHTTP(cmd.Context(), url, concurrency, duration)
			fmt.Fprintf(out, "requests/s %.0f errors %d p50 %v p99 %v\n", r.rps, r.errors, r.p50, r.p99)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&url, "url", "", "what to GET")
	fl.DurationVar(&duration, "duration", 10*time.Second, "how long to load")
	fl.IntVar(&concurrency, "concurrency", 8, "requests in flight")
	fl.DurationVar(&firstOK, "first-ok", 0, "wait up to this long for the first 200 answer and print when it came (no load)")
	return cmd
}

func getOnce(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func firstAnswer(ctx context.Context, url string, limit time.Duration) (time.Time, error) {
	// A try that is not answered at once (a SYN to an address no rule
	// translates yet) is given up soon, so the next one is a new
	// connection that the rules, once there, translate.
	c := &http.Client{Timeout: 50 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := getOnce(ctx, c, url); err == nil {
			return time.Now(), nil
		} else if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no answer within %v: %w", limit, err)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-tick.C:
		}
	}
}

type httpLoad struct {
	rps      float64
	errors   int64
	p50, p99 time.Duration
}

func loadHTTP(ctx context.Context, url string, concurrency int, d time.Duration) httpLoad {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range max(concurrency, 1) {
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := getOnce(ctx, c, url); err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r := httpLoad{rps: float64(len(lat)) / elapsed.Seconds(), errors: errs.Load()}
	if n := len(lat); n > 0 {
		r.p50, r.p99 = lat[n/2], lat[n*99/100]
	}
	return r
}
