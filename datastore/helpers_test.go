package datastore_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/datastore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/internal/testetcd"
)

// waitFor bounds every wait of the suite.
const waitFor = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a store on dsn, closed when the test ends.
func openStore(t *testing.T, dsn string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(testCtx(t), sqlstore.Options{DSN: dsn, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("Open(%s): %v", dsn, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// entry is what a key must keep across a move.
type entry struct {
	value []byte
	lease int64
}

// cluster is what fill wrote: the live keys, the leases, and a value a key
// had in the past.
type cluster struct {
	keys     map[string]entry
	leases   map[int64]int64 // id -> granted TTL
	revision int64
	// oldKey had oldValue at oldRev, after the compaction: a copy that keeps
	// history still reads it there.
	oldKey   string
	oldValue []byte
	oldRev   int64
	compact  int64
}

var resources = []string{"pods", "configmaps", "secrets", "services", "deployments.apps", "events"}

// fill writes n Kubernetes-style keys with binary values into the store
// (a tenth of them on one of three leases), overwrites a fifth, deletes a
// few, compacts part of the history, and returns the state it left.
func fill(t *testing.T, s *sqlstore.Store, n int) *cluster {
	t.Helper()
	ctx := testCtx(t)
	rng := rand.New(rand.NewSource(17))
	c := &cluster{keys: map[string]entry{}, leases: map[int64]int64{}}
	var leaseIDs []int64
	for i := 0; i < 3; i++ {
		l, err := s.LeaseGrant(ctx, 0, int64(3600+600*i))
		if err != nil {
			t.Fatalf("LeaseGrant: %v", err)
		}
		c.leases[l.ID] = l.TTL
		leaseIDs = append(leaseIDs, l.ID)
	}
	value := func() []byte {
		v := make([]byte, 16+rng.Intn(2048))
		rng.Read(v)
		v[0] = 0 // always a NUL and invalid UTF-8 in there
		v[1] = 0xff
		return v
	}
	type op struct {
		key   string
		val   []byte
		lease int64
	}
	var ops []op
	for i := 0; i < n; i++ {
		res := resources[i%len(resources)]
		key := fmt.Sprintf("/registry/%s/ns-%d/obj-%04d", res, i%7, i)
		var lease int64
		if res == "events" && i%2 == 0 {
			lease = leaseIDs[i%3]
		}
		ops = append(ops, op{key, value(), lease})
	}
	// A key with bytes that are not text, and one that differs only in case.
	ops = append(ops, op{"/registry/binary/\x00\xff\xfe", value(), 0}, op{"/registry/case/OBJ", []byte("upper"), 0}, op{"/registry/case/obj", []byte{}, 0})
	write := func(ops []op) {
		var wg sync.WaitGroup
		errs := make(chan error, len(ops))
		sem := make(chan struct{}, 16)
		for _, o := range ops {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(o.key), Value: o.val, Lease: o.lease}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			t.Fatalf("Put: %v", err)
		}
		for _, o := range ops {
			c.keys[o.key] = entry{o.val, o.lease}
		}
	}
	write(ops)
	// The old value of one key, then compaction below it.
	c.oldKey = ops[1].key
	c.oldValue = ops[1].val
	rev, err := s.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.compact = rev - 10
	if _, err := s.Compact(ctx, c.compact); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	c.oldRev = rev
	var again []op
	for i := 0; i < n/5; i++ {
		o := ops[i*5+1]
		o.val = value()
		again = append(again, o)
	}
	write(again)
	for i := 0; i < 10 && i*7+3 < n; i++ {
		key := ops[i*7+3].key
		if _, _, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte(key)}); err != nil {
			t.Fatalf("DeleteRange: %v", err)
		}
		delete(c.keys, key)
	}
	if c.revision, err = s.CurrentRevision(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkKeys reads the datastore `at` names and compares its live keys,
// values and lease attachments with want's.
func checkKeys(t *testing.T, at string, want *cluster) datastore.Header {
	t.Helper()
	ctx := testCtx(t)
	src, err := datastore.OpenSource(ctx, at)
	if err != nil {
		t.Fatalf("OpenSource(%s): %v", at, err)
	}
	defer src.Close()
	leases := map[int64]bool{}
	if err := src.Leases(ctx, func(ls []datastore.LeaseRow) error {
		for _, l := range ls {
			leases[l.ID] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id := range want.leases {
		if !leases[id] {
			t.Errorf("%s: lease %x missing", at, id)
		}
	}
	got := map[string]entry{}
	var prev []byte
	if err := src.Current(ctx, func(kvs []datastore.KeyValue) error {
		for _, kv := range kvs {
			if prev != nil && bytes.Compare(prev, kv.Key) >= 0 {
				t.Errorf("%s: keys out of order: %q after %q", at, kv.Key, prev)
			}
			prev = append(prev[:0], kv.Key...)
			got[string(kv.Key)] = entry{append([]byte(nil), kv.Value...), kv.Lease}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.keys) {
		t.Errorf("%s holds %d keys, want %d", at, len(got), len(want.keys))
	}
	var bad []string
	for k, w := range want.keys {
		g, ok := got[k]
		if !ok || !bytes.Equal(g.value, w.value) || g.lease != w.lease {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("%s: %d keys missing or different, first %q", at, len(bad), bad[0])
	}
	return src.Header()
}

// writeAfter writes one key to a SQL datastore and returns its revision.
func writeAfter(t *testing.T, dsn string) int64 {
	t.Helper()
	s := openStore(t, dsn)
	_, rev, err := s.Put(testCtx(t), sqlstore.PutRequest{Key: []byte("/registry/after-migration"), Value: []byte("x")})
	if err != nil {
		t.Fatalf("Put after migration: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return rev
}

// startEtcd runs a real etcd server for the test and returns its client
// address; without the etcd binary the test is skipped (a failure under
// CI=true).
func startEtcd(t *testing.T) string {
	t.Helper()
	addr := testetcd.Start(t, waitFor)
	if addr == "" {
		t.Skip("skipping: no etcd binary in PATH (apt-get install etcd-server, or make test-deps)")
	}
	return addr
}
