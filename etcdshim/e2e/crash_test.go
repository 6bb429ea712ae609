package e2e

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// newClient is a clientv3 client of the server, closed when the test ends.
func (s *server) newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestSqlkube_CrashKeepsAcknowledgedWrites(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		dsn := b.NewDSN(t)
		s := startServer(t, dsn)
		cli := s.newClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
		defer cancel()

		lease, err := cli.Grant(ctx, 600)
		if err != nil {
			t.Fatalf("grant: %v", err)
		}
		leased, err := cli.Put(ctx, "crash/leased", "x", clientv3.WithLease(lease.ID))
		if err != nil {
			t.Fatalf("put with lease: %v", err)
		}
		base := leased.Header.Revision // every later revision is one put below

		// Writers put distinct keys until the process dies under them;
		// it is killed as soon as enough writes were acknowledged, with
		// more in flight.
		const writers, enough = 8, 200
		var (
			mu    sync.Mutex
			acked = map[string]int64{} // key -> revision its put was acknowledged at
			full  = make(chan struct{})
			once  sync.Once
			wg    sync.WaitGroup
		)
		wctx, stopWriters := context.WithCancel(ctx)
		defer stopWriters()
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; wctx.Err() == nil; i++ {
					key := fmt.Sprintf("crash/%d/%04d", w, i)
					resp, err := cli.Put(wctx, key, key)
					if err != nil {
						return
					}
					mu.Lock()
					acked[key] = resp.Header.Revision
					if len(acked) >= enough {
						once.Do(func() { close(full) })
					}
					mu.Unlock()
				}
			}()
		}
		select {
		case <-full:
		case <-time.After(waitFor):
			stopWriters()
			wg.Wait()
			t.Fatalf("only %d puts acknowledged within %v:\n%s", len(acked), waitFor, s.log)
		}
		s.kill(t)
		stopWriters()
		wg.Wait()
		cli.Close()

		revAcked := map[int64]string{}
		var last int64
		for key, rev := range acked {
			if other, dup := revAcked[rev]; dup {
				t.Errorf("puts of %s and %s both acknowledged at revision %d", key, other, rev)
			}
			revAcked[rev] = key
			last = max(last, rev)
		}
		t.Logf("killed after %d puts acknowledged, the last at revision %d", len(acked), last)

		s = startServer(t, dsn)
		cli = s.newClient(t)
		ctx, cancel = context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		got, err := cli.Get(ctx, "crash/", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("get after restart: %v", err)
		}
		rev := got.Header.Revision
		if rev < last {
			t.Errorf("revision after restart %d, want at least %d, the last acknowledged", rev, last)
		}
		present := map[string]int64{}
		var revsSeen []int64
		for _, kv := range got.Kvs {
			key := string(kv.Key)
			present[key] = kv.ModRevision
			revsSeen = append(revsSeen, kv.ModRevision)
			if key == "crash/leased" {
				continue
			}
			// Writes not acknowledged may have been committed or not, but
			// whatever is there was written whole, once.
			if string(kv.Value) != key || kv.Version != 1 || kv.CreateRevision != kv.ModRevision {
				t.Errorf("after restart %s = %q (version %d, created at %d, modified at %d), want its own name, written once",
					key, kv.Value, kv.Version, kv.CreateRevision, kv.ModRevision)
			}
		}
		lost := 0
		for key, want := range acked {
			if got, ok := present[key]; !ok || got != want {
				if lost++; lost <= 10 {
					t.Errorf("acknowledged put of %s at revision %d: after restart found=%v at revision %d", key, want, ok, got)
				}
			}
		}
		if lost > 0 {
			t.Errorf("%d of %d acknowledged puts lost or moved by the crash", lost, len(acked))
		}
		if present["crash/leased"] != base {
			t.Errorf("crash/leased at revision %d after restart, want %d", present["crash/leased"], base)
		}
		// Each revision from base to rev is exactly one of these puts:
		// no revision was skipped or given twice across the crash.
		sort.Slice(revsSeen, func(i, j int) bool { return revsSeen[i] < revsSeen[j] })
		for i, r := range revsSeen {
			if r != base+int64(i) {
				t.Errorf("revisions of the keys after restart run %d..%d with a gap or repeat at %d (position %d)", revsSeen[0], revsSeen[len(revsSeen)-1], r, i)
				break
			}
		}
		t.Logf("after restart at revision %d: %d puts there that were not acknowledged", rev, len(got.Kvs)-1-len(acked))
		if n := len(revsSeen); n == 0 || revsSeen[n-1] != rev {
			t.Errorf("revision after restart %d, want the last put's (revisions of the keys: %v)", rev, revsSeen)
		}

		next, err := cli.Put(ctx, "crash/next", "y")
		if err != nil {
			t.Fatalf("put after restart: %v", err)
		}
		if next.Header.Revision != rev+1 {
			t.Errorf("first put after restart at revision %d, want %d", next.Header.Revision, rev+1)
		}

		ttl, err := cli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatalf("timetolive after restart: %v", err)
		}
		if ttl.TTL <= 0 || ttl.TTL > 600 || ttl.GrantedTTL != 600 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "crash/leased" {
			t.Errorf("lease after restart: ttl %d, granted %d, keys %q; want it alive, granted 600s, with crash/leased", ttl.TTL, ttl.GrantedTTL, ttl.Keys)
		}
		if _, err := cli.KeepAliveOnce(ctx, lease.ID); err != nil {
			t.Errorf("keepalive of the lease after restart: %v", err)
		}
	})
}
