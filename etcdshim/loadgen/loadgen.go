// Package loadgen drives an etcd v3 endpoint (sqlkube's, kine's or etcd's
// own) with the request shapes kube-apiserver sends, and reports throughput
// and latency percentiles, so peers can be measured side by side in one run.
package loadgen

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Workload names.
const (
	// Create: a txn "create if mod_revision == 0" of a new key, as the
	// apiserver's Create does.
	Create = "create"
	// Update: a txn "put if mod_revision == last" on existing keys, as
	// GuaranteedUpdate does.
	Update = "update"
	// Get: a linearizable single-key range.
	Get = "get"
	// List: a prefix range of up to 500 keys out of the key space.
	List = "list"
	// Watch: put on one client, time until a watch on another sees it.
	Watch = "watch"
)

// Workloads lists every workload in the order Run reports them.
var Workloads = []string{Create, Update, Get, List, Watch}

// Config describes one run.
type Config struct {
	Endpoints   []string
	Clients     int           // gRPC connections
	Concurrency int           // requests in flight
	Duration    time.Duration // per workload
	ValueSize   int
	Keys        int // keys the update/get/list workloads work over
	Prefix      string
	// WatchEndpoints, when set, is where the watch workload watches (its
	// puts still go to Endpoints): a second server on the same database
	// measures cross-instance delivery.
	WatchEndpoints []string
	// KeepKeys leaves the keys written in place at the end (by default
	// they are deleted), for other tools to read.
	KeepKeys bool
}

// Result is one workload's numbers.
type Result struct {
	Workload  string
	Ops       int
	Errors    int
	Elapsed   time.Duration
	P50, P99  time.Duration
	OpsPerSec float64
}

func (r Result) String() string {
	return fmt.Sprintf("%-7s %9.0f ops/s  p50 %8s  p99 %8s  (%d ops, %d errors)",
		r.Workload, r.OpsPerSec, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Ops, r.Errors)
}

// Run runs the named workloads (all when empty) and returns their results.
func Run(ctx context.Context, cfg Config, workloads []string) ([]Result, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = 4
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.ValueSize <= 0 {
		cfg.ValueSize = 1024
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 2000
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/registry/loadgen/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
	}
	if len(workloads) == 0 {
		workloads = Workloads
	}
	clients := make([]*clientv3.Client, cfg.Clients)
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("loadgen: connect: %w", err)
		}
		defer c.Close()
		clients[i] = c
	}
	g := &gen{cfg: cfg, clients: clients, watcher: clients[len(clients)-1], value: make([]byte, cfg.ValueSize)}
	if len(cfg.WatchEndpoints) > 0 {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.WatchEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("loadgen: connect to the watch endpoints: %w", err)
		}
		defer c.Close()
		g.watcher = c
	}
	rand.New(rand.NewSource(1)).Read(g.value)
	if err := g.seed(ctx); err != nil {
		return nil, err
	}
	var out []Result
	for _, w := range workloads {
		var (
			r   Result
			err error
		)
		switch w {
		case Create:
			var n atomic.Int64
			r = g.loop(ctx, w, func(ctx context.Context, c *clientv3.Client) error {
				key := fmt.Sprintf("%screate/%012d", cfg.Prefix, n.Add(1))
				_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
					Then(clientv3.OpPut(key, string(g.value))).Commit()
				return err
			})
		case Update:
			// GuaranteedUpdate's shape: compare-and-swap on the mod
			// revision, reading the current value back on conflict.
			r = g.loop(ctx, w, func(ctx context.Context, c *clientv3.Client) error {
				key := g.key(rand.Intn(cfg.Keys))
				get, err := c.Get(ctx, key)
				if err != nil {
					return err
				}
				rev := int64(0)
				if len(get.Kvs) > 0 {
					rev = get.Kvs[0].ModRevision
				}
				for {
					resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
						Then(clientv3.OpPut(key, string(g.value))).Else(clientv3.OpGet(key)).Commit()
					if err != nil || resp.Succeeded {
						return err
					}
					rev = 0
					if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
						rev = kvs[0].ModRevision
					}
				}
			})
		case Get:
			r = g.loop(ctx, w, func(ctx context.Context, c *clientv3.Client) error {
				_, err := c.Get(ctx, g.key(rand.Intn(cfg.Keys)))
				return err
			})
		case List:
			r = g.loop(ctx, w, func(ctx context.Context, c *clientv3.Client) error {
				_, err := c.Get(ctx, cfg.Prefix+"seed/", clientv3.WithPrefix(), clientv3.WithLimit(500))
				return err
			})
		case Watch:
			r, err = g.watchLatency(ctx)
		default:
			return out, fmt.Errorf("loadgen: unknown workload %q (want one of %v)", w, Workloads)
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	// Leave the endpoint as we found it, near enough.
	if !cfg.KeepKeys {
		_, _ = clients[0].Delete(ctx, cfg.Prefix, clientv3.WithPrefix())
	}
	return out, nil
}

type gen struct {
	cfg     Config
	clients []*clientv3.Client
	watcher *clientv3.Client // where the watch workload watches
	value   []byte
}

func (g *gen) key(i int) string { return fmt.Sprintf("%sseed/%08d", g.cfg.Prefix, i) }

// seed writes the keys the update, get and list workloads use.
func (g *gen) seed(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, g.cfg.Concurrency)
	next := atomic.Int64{}
	for w := 0; w < g.cfg.Concurrency; w++ {
		wg.Add(1)
		go func(c *clientv3.Client) {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= g.cfg.Keys {
					return
				}
				if _, err := c.Put(ctx, g.key(i), string(g.value)); err != nil {
					errs <- err
					return
				}
			}
		}(g.clients[w%len(g.clients)])
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("loadgen: seed: %w", err)
	}
	return nil
}

// loop runs op from Concurrency goroutines for Duration.
func (g *gen) loop(ctx context.Context, name string, op func(context.Context, *clientv3.Client) error) Result {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Duration)
	defer cancel()
	var (
		mu   sync.Mutex
		lats []time.Duration
		errs int
		wg   sync.WaitGroup
	)
	start := time.Now()
	for w := 0; w < g.cfg.Concurrency; w++ {
		wg.Add(1)
		go func(c *clientv3.Client) {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for ctx.Err() == nil {
				t := time.Now()
				err := op(ctx, c)
				if ctx.Err() != nil {
					break
				}
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lats = append(lats, mine...)
			errs += bad
			mu.Unlock()
		}(g.clients[w%len(g.clients)])
	}
	wg.Wait()
	return summarize(name, lats, errs, time.Since(start))
}

// watchLatency puts keys one at a time through one client and measures how
// long a watch on another client takes to see each.
func (g *gen) watchLatency(ctx context.Context) (Result, error) {
	prefix := g.cfg.Prefix + "watch/"
	wc := g.watcher
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := wc.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-ch; !resp.Created {
		return Result{}, fmt.Errorf("loadgen: watch not created: %v", resp.Err())
	}
	var lats []time.Duration
	start := time.Now()
	deadline := start.Add(g.cfg.Duration)
	for i := 0; time.Now().Before(deadline); i++ {
		key := fmt.Sprintf("%s%08d", prefix, i)
		t := time.Now()
		if _, err := g.clients[0].Put(ctx, key, string(g.value)); err != nil {
			return Result{}, err
		}
		select {
		case resp, ok := <-ch:
			if !ok || resp.Err() != nil {
				return Result{}, fmt.Errorf("loadgen: watch ended: %v", resp.Err())
			}
			lats = append(lats, time.Since(t))
		case <-time.After(10 * time.Second):
			return Result{}, fmt.Errorf("loadgen: watch event for %s not seen in 10s", key)
		}
	}
	return summarize(Watch, lats, 0, time.Since(start)), nil
}

func summarize(name string, lats []time.Duration, errs int, elapsed time.Duration) Result {
	r := Result{Workload: name, Ops: len(lats), Errors: errs, Elapsed: elapsed}
	if len(lats) == 0 {
		return r
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	r.P50 = lats[len(lats)/2]
	r.P99 = lats[min(len(lats)-1, len(lats)*99/100)]
	r.OpsPerSec = float64(len(lats)) / elapsed.Seconds()
	return r
}
