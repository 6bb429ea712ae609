package sqlstore_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// model is the expected state of a store at every revision: what the store
// must answer to reads at the current and at past revisions.
type model struct {
	rev   int64
	snaps []map[string]sqlstore.KeyValue // snaps[r] is the state at revision r
}

// newModel is an empty store: at revision 1, as etcd starts, with nothing
// in it.
func newModel() *model { return &model{rev: 1, snaps: []map[string]sqlstore.KeyValue{{}, {}}} }

func (m *model) next() map[string]sqlstore.KeyValue {
	cur := map[string]sqlstore.KeyValue{}
	for k, v := range m.snaps[m.rev] {
		cur[k] = v
	}
	m.rev++
	m.snaps = append(m.snaps, cur)
	return cur
}

// put writes key=val through s and into the model, and checks the revision.
func (m *model) put(t *testing.T, s *sqlstore.Store, key, val string) {
	t.Helper()
	rev := put(t, s, key, val)
	cur := m.next()
	if rev != m.rev {
		t.Fatalf("Put(%q): revision %d, want %d", key, rev, m.rev)
	}
	kv := kv(key, val, m.rev, m.rev, 1, 0)
	if prev, ok := cur[key]; ok {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
	}
	cur[key] = kv
}

// del removes [key, end) through s and from the model, at one revision, or
// at none if nothing matched. end "" means the single key, "\x00" every key
// from key.
func (m *model) del(t *testing.T, s *sqlstore.Store, key, end string) {
	t.Helper()
	rev := del(t, s, key, end)
	if len(m.rangeAt(m.rev, key, end)) == 0 {
		if rev != m.rev {
			t.Fatalf("DeleteRange(%q, %q) of nothing: revision %d, want %d", key, end, rev, m.rev)
		}
		return
	}
	cur := m.next()
	if rev != m.rev {
		t.Fatalf("DeleteRange(%q, %q): revision %d, want %d", key, end, rev, m.rev)
	}
	for _, kv := range m.rangeAt(m.rev-1, key, end) {
		delete(cur, string(kv.Key))
	}
}

// rangeAt is the model's answer to a range in key order; end "" means the
// single key, "\x00" every key from start.
func (m *model) rangeAt(rev int64, key, end string) []sqlstore.KeyValue {
	var out []sqlstore.KeyValue
	for k, v := range m.snaps[rev] {
		in := k == key
		if end == "\x00" {
			in = k >= key
		} else if end != "" {
			in = k >= key && k < end
		}
		if in {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	return out
}

// modelEvents are the events the model's history implies from revision
// from on, in revision and key order (the order of one revision's events is
// checked elsewhere).
func (m *model) events(from int64) []sqlstore.Event {
	var out []sqlstore.Event
	for rev := from; rev <= m.rev; rev++ {
		before, after := m.snaps[rev-1], m.snaps[rev]
		var evs []sqlstore.Event
		for k, cur := range after {
			if cur.ModRevision == rev {
				var prev *sqlstore.KeyValue
				if p, ok := before[k]; ok {
					prev = ptr(p)
				}
				evs = append(evs, putEv(cur, prev))
			}
		}
		for k, p := range before {
			if _, ok := after[k]; !ok {
				evs = append(evs, delEv(k, rev, ptr(p)))
			}
		}
		sort.Slice(evs, func(i, j int) bool { return bytes.Compare(evs[i].KV.Key, evs[j].KV.Key) < 0 })
		out = append(out, evs...)
	}
	return out
}

// sortedByRevKey orders events by revision, then key, keeping the rest.
func sortedByRevKey(evs []sqlstore.Event) []sqlstore.Event {
	out := append([]sqlstore.Event(nil), evs...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].KV.ModRevision != out[j].KV.ModRevision {
			return out[i].KV.ModRevision < out[j].KV.ModRevision
		}
		return bytes.Compare(out[i].KV.Key, out[j].KV.Key) < 0
	})
	return out
}

// TestStore_History applies a fixed pseudo-random sequence of puts and
// deletes and checks every past revision, the watch stream, and both again
// after a compaction and a restart, against a model.
func TestStore_History(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s := open(t, dsn)
		w, rec := watch(t, s, []byte{0}, []byte{0}, 1)
		m := newModel()
		r := rand.New(rand.NewPCG(1, 2))
		keys := []string{"a", "a/1", "a/2", "a/3", "b", "b/1", "c"}
		for range 150 {
			k := keys[r.IntN(len(keys))]
			switch n := r.IntN(20); {
			case n < 3:
				m.del(t, s, k, "")
			case n < 5:
				m.del(t, s, k, string(prefixEnd([]byte(k))))
			case n < 6:
				m.del(t, s, k, "\x00")
			default:
				m.put(t, s, k, fmt.Sprintf("%s@%d", k, m.rev+1))
			}
		}
		if m.rev < 100 {
			t.Fatalf("only %d revisions written", m.rev)
		}

		checkReads := func(t *testing.T, s *sqlstore.Store, from int64) {
			t.Helper()
			for rev := from; rev <= m.rev; rev++ {
				what := fmt.Sprintf("at revision %d", rev)
				checkKVs(t, "all keys "+what, rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, Revision: rev}).KVs, m.rangeAt(rev, "\x00", "\x00"))
				checkKVs(t, "prefix a/ "+what, rng(t, s, sqlstore.RangeRequest{Key: []byte("a/"), End: []byte("a0"), Revision: rev}).KVs, m.rangeAt(rev, "a/", "a0"))
				checkKVs(t, "key b "+what, rng(t, s, sqlstore.RangeRequest{Key: []byte("b"), Revision: rev}).KVs, m.rangeAt(rev, "b", ""))
				lim := rng(t, s, sqlstore.RangeRequest{Key: []byte("a"), End: []byte("b0"), Revision: rev, Limit: 2})
				want := m.rangeAt(rev, "a", "b0")
				if int64(len(want)) != lim.Count || lim.More != (len(want) > 2) {
					t.Errorf("limit 2 %s: count %d more %v, want %d keys", what, lim.Count, lim.More, len(want))
				}
				if len(want) > 2 {
					want = want[:2]
				}
				checkKVs(t, "limit 2 "+what, lim.KVs, want)
			}
		}
		t.Run("reads", func(t *testing.T) { checkReads(t, s, 1) })

		t.Run("watch", func(t *testing.T) {
			waitSent(t, w, m.rev)
			checkStrings(t, "events", evStrings(sortedByRevKey(rec.events())), evStrings(m.events(1)))
			rec.checkBatches(t)
		})

		compactAt := m.rev / 2
		if _, err := s.Compact(ctx, compactAt); err != nil {
			t.Fatal(err)
		}
		t.Run("reads after compaction", func(t *testing.T) { checkReads(t, s, compactAt) })
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s2 := open(t, dsn)
		t.Run("after restart", func(t *testing.T) {
			checkReads(t, s2, compactAt)
			w, rec := watch(t, s2, []byte{0}, []byte{0}, compactAt+1)
			waitSent(t, w, m.rev)
			checkStrings(t, "events from the log", evStrings(sortedByRevKey(rec.events())), evStrings(m.events(compactAt+1)))
			rec.checkBatches(t)
		})
	})
}
