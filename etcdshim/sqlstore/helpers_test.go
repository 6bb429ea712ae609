package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// waitFor bounds every poll and wait of the suite.
const waitFor = 10 * time.Second

// open opens a store on dsn and closes it when the test ends.
func open(t *testing.T, dsn string) *sqlstore.Store {
	t.Helper()
	return openWith(t, sqlstore.Options{DSN: dsn})
}

// openWith opens a store with opts (the logger is always silent) and closes
// it when the test ends.
func openWith(t *testing.T, opts sqlstore.Options) *sqlstore.Store {
	t.Helper()
	opts.Logger = zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sqlstore.Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", opts.DSN, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// put writes key=val and returns the revision of the write.
func put(t *testing.T, s *sqlstore.Store, key, val string) int64 {
	t.Helper()
	_, rev, err := s.Put(context.Background(), sqlstore.PutRequest{Key: []byte(key), Value: []byte(val)})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return rev
}

// del removes the range [key, end) and returns the store's revision after it.
func del(t *testing.T, s *sqlstore.Store, key, end string) int64 {
	t.Helper()
	req := sqlstore.DeleteRequest{Key: []byte(key)}
	if end != "" {
		req.End = []byte(end)
	}
	_, rev, err := s.DeleteRange(context.Background(), req)
	if err != nil {
		t.Fatalf("DeleteRange(%q, %q): %v", key, end, err)
	}
	return rev
}

// rng runs a range that must succeed.
func rng(t *testing.T, s *sqlstore.Store, req sqlstore.RangeRequest) *sqlstore.RangeResult {
	t.Helper()
	res, err := s.Range(context.Background(), req)
	if err != nil {
		t.Fatalf("Range(%q, %q, rev %d): %v", req.Key, req.End, req.Revision, err)
	}
	return res
}

// get reads one key at the current revision; nil if it does not exist.
func get(t *testing.T, s *sqlstore.Store, key string) *sqlstore.KeyValue {
	t.Helper()
	return getAt(t, s, key, 0)
}

// getAt reads one key at rev; nil if it did not exist then.
func getAt(t *testing.T, s *sqlstore.Store, key string, rev int64) *sqlstore.KeyValue {
	t.Helper()
	res := rng(t, s, sqlstore.RangeRequest{Key: []byte(key), Revision: rev})
	switch len(res.KVs) {
	case 0:
		return nil
	case 1:
		return &res.KVs[0]
	}
	t.Fatalf("Range of single key %q returned %d keys", key, len(res.KVs))
	return nil
}

// currentRev reads the store's current revision.
func currentRev(t *testing.T, s *sqlstore.Store) int64 {
	t.Helper()
	rev, err := s.CurrentRevision(context.Background())
	if err != nil {
		t.Fatalf("CurrentRevision: %v", err)
	}
	return rev
}

// kvString renders a KeyValue for comparison; byte strings are quoted so
// every byte shows.
func kvString(kv *sqlstore.KeyValue) string {
	if kv == nil {
		return "<none>"
	}
	return fmt.Sprintf("%q=%q c%d m%d v%d l%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
}

// kv builds the expected KeyValue.
func kv(key, val string, create, mod, version, lease int64) sqlstore.KeyValue {
	return sqlstore.KeyValue{Key: []byte(key), Value: []byte(val), CreateRevision: create, ModRevision: mod, Version: version, Lease: lease}
}

func kvStrings(kvs []sqlstore.KeyValue) []string {
	out := make([]string, len(kvs))
	for i := range kvs {
		out[i] = kvString(&kvs[i])
	}
	return out
}

func keyStrings(kvs []sqlstore.KeyValue) []string {
	out := make([]string, len(kvs))
	for i := range kvs {
		out[i] = string(kvs[i].Key)
	}
	return out
}

// checkKV fails the test unless got is want (nil meaning absent).
func checkKV(t *testing.T, what string, got, want *sqlstore.KeyValue) {
	t.Helper()
	if g, w := kvString(got), kvString(want); g != w {
		t.Errorf("%s:\n got  %s\n want %s", what, g, w)
	}
}

// checkKVs fails the test unless got and want hold the same versions in the
// same order.
func checkKVs(t *testing.T, what string, got, want []sqlstore.KeyValue) {
	t.Helper()
	checkStrings(t, what, kvStrings(got), kvStrings(want))
}

func checkStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
		t.Errorf("%s:\n got  (%d)\n  %s\n want (%d)\n  %s", what, len(got), strings.Join(got, "\n  "), len(want), strings.Join(want, "\n  "))
	}
}

// checkErr fails the test unless errors.Is(err, want).
func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got error %v, want %v", what, err, want)
	}
}

// checkRev fails the test unless the store is at revision want.
func checkRev(t *testing.T, s *sqlstore.Store, want int64) {
	t.Helper()
	if got := currentRev(t, s); got != want {
		t.Errorf("current revision: got %d, want %d", got, want)
	}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	var lastErr error
	for {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", waitFor, what, lastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// evString renders an event for comparison.
func evString(ev sqlstore.Event) string {
	typ := "PUT"
	if ev.Type == sqlstore.EventDelete {
		typ = "DELETE"
	}
	return fmt.Sprintf("%s %s prev %s", typ, kvString(&ev.KV), kvString(ev.PrevKV))
}

func evStrings(evs []sqlstore.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = evString(ev)
	}
	return out
}

// putEv and delEv build expected events.
func putEv(cur sqlstore.KeyValue, prev *sqlstore.KeyValue) sqlstore.Event {
	return sqlstore.Event{Type: sqlstore.EventPut, KV: cur, PrevKV: prev}
}

func delEv(key string, rev int64, prev *sqlstore.KeyValue) sqlstore.Event {
	return sqlstore.Event{Type: sqlstore.EventDelete, KV: sqlstore.KeyValue{Key: []byte(key), ModRevision: rev}, PrevKV: prev}
}

func ptr(kv sqlstore.KeyValue) *sqlstore.KeyValue { return &kv }

// recorder collects what a watch delivers.
type recorder struct {
	mu      sync.Mutex
	batches []sqlstore.WatchBatch
	// entered, if set, is signalled (without blocking) when a delivery
	// begins; gate, if set, is then received from before the batch is
	// recorded, so a test can hold the watch in deliver.
	entered chan struct{}
	gate    chan struct{}
	opened  sync.Once
}

// open lets deliveries of a gated recorder through.
func (r *recorder) open() {
	if r.gate != nil {
		r.opened.Do(func() { close(r.gate) })
	}
}

// gated returns a recorder whose deliveries wait for gate to be closed.
func gated() *recorder {
	return &recorder{entered: make(chan struct{}, 1), gate: make(chan struct{})}
}

func (r *recorder) deliver(b sqlstore.WatchBatch) error {
	if r.entered != nil {
		select {
		case r.entered <- struct{}{}:
		default:
		}
	}
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, b)
	return nil
}

func (r *recorder) events() []sqlstore.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sqlstore.Event
	for _, b := range r.batches {
		out = append(out, b.Events...)
	}
	return out
}

// checkBatches fails the test unless batches come in revision order and each
// holds only events at or below its revision, above the previous batch's.
func (r *recorder) checkBatches(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var last, lastEv int64
	for i, b := range r.batches {
		if b.Revision <= last {
			t.Errorf("batch %d: revision %d not above previous batch's %d", i, b.Revision, last)
		}
		if len(b.Events) == 0 {
			t.Errorf("batch %d (revision %d) is empty", i, b.Revision)
		}
		for _, ev := range b.Events {
			if ev.KV.ModRevision <= last || ev.KV.ModRevision > b.Revision {
				t.Errorf("batch %d (revision %d, previous %d) holds an event at revision %d", i, b.Revision, last, ev.KV.ModRevision)
			}
			if ev.KV.ModRevision < lastEv {
				t.Errorf("batch %d: event at revision %d after one at %d", i, ev.KV.ModRevision, lastEv)
			}
			lastEv = ev.KV.ModRevision
		}
		last = b.Revision
	}
}

// watch starts a watch of [key, end) from start whose deliveries are
// recorded; it is cancelled when the test ends.
func watch(t *testing.T, s *sqlstore.Store, key, end []byte, start int64) (*sqlstore.Watch, *recorder) {
	t.Helper()
	return watchWith(t, s, key, end, start, &recorder{})
}

func watchWith(t *testing.T, s *sqlstore.Store, key, end []byte, start int64, r *recorder) (*sqlstore.Watch, *recorder) {
	t.Helper()
	w, err := s.Watch(context.Background(), key, end, start, r.deliver)
	if err != nil {
		t.Fatalf("Watch(%q, %q, from %d): %v", key, end, start, err)
	}
	t.Cleanup(func() {
		r.open() // a test that failed may have left the watch in deliver
		w.Cancel()
	})
	return w, r
}

// waitSent waits until the watch delivered everything up to rev.
func waitSent(t *testing.T, w *sqlstore.Watch, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := w.WaitSent(ctx, rev); err != nil {
		t.Fatalf("WaitSent(%d): %v (sent %d, watch error %v)", rev, err, w.Sent(), w.Err())
	}
}

// prefixEnd is etcd's range end of every key starting with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// rawDB opens the database behind a store's DSN directly, for checks the
// store's API cannot make (rows left in kv_log, the migration version).
func rawDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	var (
		db  *sql.DB
		err error
	)
	switch {
	case strings.HasPrefix(dsn, "sqlite://"):
		db, err = sql.Open("sqlite3", "file:"+strings.TrimPrefix(dsn, "sqlite://")+"?_busy_timeout=10000")
	case strings.HasPrefix(dsn, "postgres://"):
		db, err = sql.Open("pgx", dsn)
	case strings.HasPrefix(dsn, "mysql://"):
		db, err = sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	default:
		t.Fatalf("rawDB: unknown DSN %q", dsn)
	}
	if err != nil {
		t.Fatalf("rawDB: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// countRows counts the rows of a table through db.
func countRows(t *testing.T, db *sql.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
