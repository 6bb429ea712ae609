package loadgen

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ChurnConfig describes a churn run: creates, updates and deletes over a
// bounded key space for a long time, reported interval by interval.
type ChurnConfig struct {
	Endpoints   []string
	Clients     int           // gRPC connections
	Concurrency int           // requests in flight
	Duration    time.Duration // the whole run
	Interval    time.Duration // one report per interval
	ValueSize   int
	Keys        int // key slots; about three quarters are live at a time
	Prefix      string
}

// ChurnInterval is one interval's numbers.
type ChurnInterval struct {
	End                       time.Duration // since the start
	Creates, Updates, Deletes int
	Errors                    int
	OpsPerSec                 float64
	P50, P99                  time.Duration
	Revision                  int64
	DBSize                    int64 // as the endpoint's Status reports it
}

func (c ChurnInterval) String() string {
	return fmt.Sprintf("%6s %8.0f ops/s  p50 %8s  p99 %8s  creates %d updates %d deletes %d errors %d  revision %d  db %.1f MiB",
		c.End.Round(time.Second), c.OpsPerSec, c.P50.Round(time.Microsecond), c.P99.Round(time.Microsecond),
		c.Creates, c.Updates, c.Deletes, c.Errors, c.Revision, float64(c.DBSize)/(1<<20))
}

// Churn runs creates, updates and deletes as kube-apiserver sends them
// (Txns conditioned on the key's mod revision) for cfg.Duration and calls
// report after every interval. Each worker owns its own key slots: an
// empty slot is created, a live one updated (two times in three) or
// deleted, so about three quarters of the slots are live and a quarter of
// the operations are creates, half updates and a quarter deletes.
func Churn(ctx context.Context, cfg ChurnConfig, report func(ChurnInterval)) error {
	if cfg.Clients <= 0 {
		cfg.Clients = 4
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.ValueSize <= 0 {
		cfg.ValueSize = 1024
	}
	if cfg.Keys < cfg.Concurrency {
		cfg.Keys = max(cfg.Concurrency, 10000)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = fmt.Sprintf("/registry/churn/%d/", time.Now().UnixNano())
	}
	clients := make([]*clientv3.Client, cfg.Clients)
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("loadgen: connect: %w", err)
		}
		defer c.Close()
		clients[i] = c
	}
	value := make([]byte, cfg.ValueSize)
	rand.New(rand.NewSource(1)).Read(value)

	type sample struct {
		lat time.Duration
		op  byte // 'c', 'u', 'd'
	}
	var (
		mu      sync.Mutex
		samples []sample
		errs    int
	)
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	per := cfg.Keys / cfg.Concurrency
	var wg sync.WaitGroup
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func(w int, c *clientv3.Client) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w) + 1))
			mods := make([]int64, per) // 0: the slot's key does not exist
			for runCtx.Err() == nil {
				i := rng.Intn(per)
				key := fmt.Sprintf("%s%04d/%08d", cfg.Prefix, w, i)
				cmp := clientv3.Compare(clientv3.ModRevision(key), "=", mods[i])
				var (
					op   byte
					then clientv3.Op
				)
				switch {
				case mods[i] == 0:
					op, then = 'c', clientv3.OpPut(key, string(value))
				case rng.Intn(3) < 2:
					op, then = 'u', clientv3.OpPut(key, string(value))
				default:
					op, then = 'd', clientv3.OpDelete(key)
				}
				t := time.Now()
				resp, err := c.Txn(runCtx).If(cmp).Then(then).Else(clientv3.OpGet(key)).Commit()
				if runCtx.Err() != nil {
					return
				}
				if err != nil || !resp.Succeeded {
					// Only this worker writes the key, so a failed
					// comparison means the store lost or invented a
					// write, or a failed request was applied after all.
					// Either way it is counted, and the slot follows the
					// key as it is now.
					mu.Lock()
					errs++
					mu.Unlock()
					mods[i] = -1
					if err == nil {
						mods[i] = 0
						if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
							mods[i] = kvs[0].ModRevision
						}
					}
					for mods[i] < 0 && runCtx.Err() == nil {
						select {
						case <-runCtx.Done():
						case <-time.After(100 * time.Millisecond):
						}
						if get, err := c.Get(runCtx, key); err == nil {
							mods[i] = 0
							if len(get.Kvs) > 0 {
								mods[i] = get.Kvs[0].ModRevision
							}
						}
					}
					continue
				}
				mu.Lock()
				samples = append(samples, sample{time.Since(t), op})
				mu.Unlock()
				if op == 'd' {
					mods[i] = 0
				} else {
					mods[i] = resp.Header.Revision
				}
			}
		}(w, clients[w%len(clients)])
	}

	start := time.Now()
	last := start
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	flush := func(now time.Time) {
		mu.Lock()
		got, bad := samples, errs
		samples, errs = nil, 0
		mu.Unlock()
		r := ChurnInterval{End: now.Sub(start), Errors: bad}
		lats := make([]time.Duration, len(got))
		for i, s := range got {
			lats[i] = s.lat
			switch s.op {
			case 'c':
				r.Creates++
			case 'u':
				r.Updates++
			case 'd':
				r.Deletes++
			}
		}
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		if n := len(lats); n > 0 {
			r.P50, r.P99 = lats[n/2], lats[min(n-1, n*99/100)]
			r.OpsPerSec = float64(n) / now.Sub(last).Seconds()
		}
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		if st, err := clients[0].Status(sctx, cfg.Endpoints[0]); err == nil {
			r.Revision, r.DBSize = st.Header.Revision, st.DbSize
		}
		scancel()
		last = now
		report(r)
	}
	for {
		select {
		case now := <-tick.C:
			flush(now)
		case <-done:
			mu.Lock()
			pending := len(samples) > 0 || errs > 0
			mu.Unlock()
			if pending {
				flush(time.Now())
			}
			// Remove what the run wrote, and only that (a --prefix may
			// hold other keys), even when ctx has ended.
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			for w := 0; w < cfg.Concurrency; w++ {
				_, _ = clients[0].Delete(cctx, fmt.Sprintf("%s%04d/", cfg.Prefix, w), clientv3.WithPrefix())
			}
			ccancel()
			return ctx.Err()
		}
	}
}
