package etcdshim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestWatch_LocalStreamUnderLoad is the in-process client as the apiserver
// uses it: every watch of one context shares one stream, writes keep
// arriving, and meanwhile watches are created and cancelled and progress
// is requested on the same stream. The in-process stream has no transport
// buffers: a request the client sends waits until the server reads it, and
// the server's responses wait until the client reads them. The long-lived
// watch must keep receiving every revision.
func TestWatch_LocalStreamUnderLoad(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.srv.LocalClient()
		t.Cleanup(func() { _ = c.Close() })
		ctx := testCtx(t)

		main := c.Watch(ctx, "k/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		awaitCreated(t, main)
		// More watches on the stream: every revision is many responses.
		const others = 16
		for range others {
			awaitCreated(t, c.Watch(ctx, "k/", clientv3.WithPrefix(), clientv3.WithCreatedNotify()))
		}

		var (
			stop    atomic.Bool
			writers sync.WaitGroup
			wrote   atomic.Int64
			errs    = make(chan error, 8)
		)
		for g := range 4 {
			writers.Add(1)
			go func() {
				defer writers.Done()
				for i := 0; !stop.Load(); i++ {
					if _, err := c.Put(ctx, fmt.Sprintf("k/%d/%d", g, i%50), "v"); err != nil {
						errs <- err
						return
					}
					wrote.Add(1)
				}
			}()
		}

		// Churn: watches from the first revision (their catch-up is slow)
		// created and cancelled, and progress requested, all on the
		// main watch's stream.
		const churn = 60
		for i := range churn {
			wctx, cancel := context.WithCancel(ctx)
			c.Watch(wctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(1))
			pctx, pcancel := context.WithTimeout(ctx, waitFor)
			err := c.RequestProgress(pctx)
			pcancel()
			cancel()
			if err != nil {
				stop.Store(true)
				writers.Wait()
				t.Fatalf("progress request %d of %d not taken by the stream within %v: %v", i+1, churn, waitFor, err)
			}
		}
		stop.Store(true)
		writers.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("put: %v", err)
		}
		resp, err := c.Get(ctx, "k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		last := resp.Header.Revision
		t.Logf("%d puts during %d watch creates and cancels; last revision %d", wrote.Load(), churn, last)

		var seen int64
		deadline := time.After(waitFor)
		for seen < last {
			select {
			case r, ok := <-main:
				if !ok {
					t.Fatalf("main watch closed at revision %d of %d", seen, last)
				}
				if err := r.Err(); err != nil {
					t.Fatalf("main watch failed at revision %d of %d: %v", seen, last, err)
				}
				if n := len(r.Events); n > 0 {
					seen = r.Events[n-1].Kv.ModRevision
				}
			case <-deadline:
				t.Fatalf("main watch stuck at revision %d while the store is at %d (no event for %v)", seen, last, waitFor)
			}
		}
	})
}

// failingWatch is a store whose Watch fails while fail is set, as when
// the database is unreachable for a moment.
type failingWatch struct {
	*sqlstore.Store
	fail atomic.Bool
}

func (f *failingWatch) Watch(ctx context.Context, key, end []byte, startRev int64, deliver func(sqlstore.WatchBatch) error) (*sqlstore.Watch, error) {
	if f.fail.Load() {
		return nil, errors.New("datastore unreachable")
	}
	return f.Store.Watch(ctx, key, end, startRev, deliver)
}

// TestWatch_CreateFailsCleanly: a watch that cannot start (here, the
// store refuses it) must be closed, not left open without events, and the
// stream must go on. The in-process client is what the apiserver's watch
// caches use; a watch left open would never be restarted.
func TestWatch_CreateFailsCleanly(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		be := &failingWatch{Store: ts.store}
		srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: zerolog.Nop()})
		t.Cleanup(func() { srv.Stop(stopTimeout) })
		c := srv.LocalClient()
		t.Cleanup(func() { _ = c.Close() })
		ctx := testCtx(t)

		ok := c.Watch(ctx, "a/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		awaitCreated(t, ok)
		be.fail.Store(true)
		failed := c.Watch(ctx, "b/", clientv3.WithPrefix())
		// clientv3 closes a cancelled watch's channel (a watch cancelled
		// for a reason other than compaction carries no error to its
		// caller), which is what makes the apiserver watch again.
		deadline := time.After(waitFor)
	wait:
		for {
			select {
			case r, open := <-failed:
				if !open {
					break wait
				}
				if len(r.Events) > 0 {
					t.Fatalf("failed watch delivered events %v", describe(r.Events))
				}
			case <-deadline:
				t.Fatalf("a watch whose creation failed is still open after %v", waitFor)
			}
		}

		// The stream goes on: the other watch still gets events, and a
		// new watch starts once the store answers again.
		be.fail.Store(false)
		again := c.Watch(ctx, "b/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		awaitCreated(t, again)
		mustPut(t, ts.client, "a/1", "x")
		mustPut(t, ts.client, "b/1", "y")
		if got := collect(t, ok, 1); string(got[0].Kv.Key) != "a/1" {
			t.Errorf("first watch: got %v", describe(got))
		}
		if got := collect(t, again, 1); string(got[0].Kv.Key) != "b/1" {
			t.Errorf("new watch: got %v", describe(got))
		}
	})
}
