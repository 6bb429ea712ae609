package sqlstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"sort"
	"strconv"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

func TestStore_PutBookkeeping(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))

		// An empty store is at revision 1, as etcd's is; the first write
		// is revision 2.
		res := rng(t, s, sqlstore.RangeRequest{Key: []byte("a")})
		if len(res.KVs) != 0 || res.Count != 0 || res.Revision != 1 || res.More {
			t.Errorf("empty store: got %+v, want no keys at revision 1", res)
		}
		if res := rng(t, s, sqlstore.RangeRequest{Key: []byte("a"), Revision: 1}); len(res.KVs) != 0 {
			t.Errorf("read at revision 1 of an empty store: got %+v", res)
		}
		_, err := s.Range(context.Background(), sqlstore.RangeRequest{Key: []byte("a"), Revision: 2})
		checkErr(t, "read at revision 2 of an empty store", err, sqlstore.ErrFutureRevision)

		steps := []struct {
			op       string // put or del
			key, val string
			want     *sqlstore.KeyValue // the key afterwards
		}{
			{"put", "a", "1", ptr(kv("a", "1", 2, 2, 1, 0))},
			{"put", "a", "2", ptr(kv("a", "2", 2, 3, 2, 0))},
			{"put", "b", "x", ptr(kv("b", "x", 4, 4, 1, 0))},
			{"put", "a", "3", ptr(kv("a", "3", 2, 5, 3, 0))},
			{"del", "a", "", nil},
			{"put", "a", "again", ptr(kv("a", "again", 7, 7, 1, 0))},
			{"put", "a", "", ptr(kv("a", "", 7, 8, 2, 0))},
		}
		for i, st := range steps {
			wantRev := int64(i + 2)
			var rev int64
			if st.op == "put" {
				rev = put(t, s, st.key, st.val)
			} else {
				rev = del(t, s, st.key, "")
			}
			if rev != wantRev {
				t.Errorf("step %d (%s %q): revision %d, want %d", i, st.op, st.key, rev, wantRev)
			}
			checkKV(t, "after step "+st.op+" "+st.key, get(t, s, st.key), st.want)
		}
		checkKV(t, "b", get(t, s, "b"), ptr(kv("b", "x", 4, 4, 1, 0)))
		res = rng(t, s, sqlstore.RangeRequest{Key: []byte("a")})
		if res.Revision != 8 || res.Count != 1 {
			t.Errorf("range a: revision %d count %d, want revision 8 count 1", res.Revision, res.Count)
		}

		_, _, err = s.Put(context.Background(), sqlstore.PutRequest{Value: []byte("v")})
		checkErr(t, "put empty key", err, sqlstore.ErrEmptyKey)
		_, _, err = s.Put(context.Background(), sqlstore.PutRequest{Key: bytes.Repeat([]byte("k"), sqlstore.MaxKeySize+1)})
		checkErr(t, "put too long key", err, sqlstore.ErrKeyTooLong)
		checkRev(t, s, 8)

		long := bytes.Repeat([]byte{0xff}, sqlstore.MaxKeySize)
		if _, rev, err := s.Put(context.Background(), sqlstore.PutRequest{Key: long, Value: []byte("long")}); err != nil || rev != 9 {
			t.Fatalf("put key of MaxKeySize: revision %d, error %v; want 9, nil", rev, err)
		}
		checkKV(t, "key of MaxKeySize", get(t, s, string(long)), ptr(kv(string(long), "long", 9, 9, 1, 0)))
	})
}

// seedSort writes four keys k1..k4 whose key, version, create revision, mod
// revision and value orders all differ, then "other" outside their prefix.
// The first write is revision 2. Afterwards:
//
//	k1 "b" c4 m11 v2
//	k2 "d" c2 m9  v4
//	k3 "c" c5 m5  v1
//	k4 "a" c3 m10 v3
//	other "o" c12 m12 v1
func seedSort(t *testing.T, s *sqlstore.Store) *model {
	t.Helper()
	m := newModel()
	for _, p := range [][2]string{
		{"k2", "k2@1"}, {"k4", "k4@2"}, {"k1", "k1@3"}, {"k3", "c"}, {"k2", "k2@5"}, {"k2", "k2@6"},
		{"k4", "k4@7"}, {"k2", "d"}, {"k4", "a"}, {"k1", "b"}, {"other", "o"},
	} {
		m.put(t, s, p[0], p[1])
	}
	return m
}

func TestStore_Range(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))
		m := seedSort(t, s)
		var (
			k1    = kv("k1", "b", 4, 11, 2, 0)
			k2    = kv("k2", "d", 2, 9, 4, 0)
			k3    = kv("k3", "c", 5, 5, 1, 0)
			k4    = kv("k4", "a", 3, 10, 3, 0)
			other = kv("other", "o", 12, 12, 1, 0)
		)
		K, L := []byte("k"), []byte("l")

		tests := []struct {
			name      string
			req       sqlstore.RangeRequest
			want      []sqlstore.KeyValue
			wantCount int64
			wantMore  bool
		}{
			{"single key", sqlstore.RangeRequest{Key: []byte("k2")}, []sqlstore.KeyValue{k2}, 1, false},
			{"missing key", sqlstore.RangeRequest{Key: []byte("k")}, nil, 0, false},
			{"prefix", sqlstore.RangeRequest{Key: K, End: L}, []sqlstore.KeyValue{k1, k2, k3, k4}, 4, false},
			{"interval", sqlstore.RangeRequest{Key: []byte("k2"), End: []byte("k4")}, []sqlstore.KeyValue{k2, k3}, 2, false},
			{"from key", sqlstore.RangeRequest{Key: []byte("k3"), End: []byte{0}}, []sqlstore.KeyValue{k3, k4, other}, 3, false},
			{"from first key", sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}}, []sqlstore.KeyValue{k1, k2, k3, k4, other}, 5, false},
			{"from the empty key", sqlstore.RangeRequest{End: []byte{0}}, []sqlstore.KeyValue{k1, k2, k3, k4, other}, 5, false},
			{"up to a key from the empty key", sqlstore.RangeRequest{End: []byte("k3")}, []sqlstore.KeyValue{k1, k2}, 2, false},
			{"end before key", sqlstore.RangeRequest{Key: []byte("k4"), End: []byte("k2")}, nil, 0, false},
			{"end equals key", sqlstore.RangeRequest{Key: []byte("k2"), End: []byte("k2")}, nil, 0, false},
			{"limit", sqlstore.RangeRequest{Key: K, End: L, Limit: 2}, []sqlstore.KeyValue{k1, k2}, 4, true},
			{"limit one below count", sqlstore.RangeRequest{Key: K, End: L, Limit: 3}, []sqlstore.KeyValue{k1, k2, k3}, 4, true},
			{"limit equals count", sqlstore.RangeRequest{Key: K, End: L, Limit: 4}, []sqlstore.KeyValue{k1, k2, k3, k4}, 4, false},
			{"limit above count", sqlstore.RangeRequest{Key: K, End: L, Limit: 10}, []sqlstore.KeyValue{k1, k2, k3, k4}, 4, false},
			{"limit descending", sqlstore.RangeRequest{Key: K, End: L, Limit: 1, SortOrder: sqlstore.SortDescend}, []sqlstore.KeyValue{k4}, 4, true},
			{"limit by create", sqlstore.RangeRequest{Key: K, End: L, Limit: 2, SortTarget: sqlstore.SortByCreate, SortOrder: sqlstore.SortAscend}, []sqlstore.KeyValue{k2, k4}, 4, true},

			{"sort key ascend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByKey, SortOrder: sqlstore.SortAscend}, []sqlstore.KeyValue{k1, k2, k3, k4}, 4, false},
			{"sort key descend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByKey, SortOrder: sqlstore.SortDescend}, []sqlstore.KeyValue{k4, k3, k2, k1}, 4, false},
			{"sort version ascend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByVersion, SortOrder: sqlstore.SortAscend}, []sqlstore.KeyValue{k3, k1, k4, k2}, 4, false},
			{"sort version descend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByVersion, SortOrder: sqlstore.SortDescend}, []sqlstore.KeyValue{k2, k4, k1, k3}, 4, false},
			{"sort create ascend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByCreate, SortOrder: sqlstore.SortAscend}, []sqlstore.KeyValue{k2, k4, k1, k3}, 4, false},
			{"sort create descend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByCreate, SortOrder: sqlstore.SortDescend}, []sqlstore.KeyValue{k3, k1, k4, k2}, 4, false},
			{"sort mod ascend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByMod, SortOrder: sqlstore.SortAscend}, []sqlstore.KeyValue{k3, k2, k4, k1}, 4, false},
			{"sort mod descend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByMod, SortOrder: sqlstore.SortDescend}, []sqlstore.KeyValue{k1, k4, k2, k3}, 4, false},
			{"sort value ascend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByValue, SortOrder: sqlstore.SortAscend}, []sqlstore.KeyValue{k4, k1, k3, k2}, 4, false},
			{"sort value descend", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByValue, SortOrder: sqlstore.SortDescend}, []sqlstore.KeyValue{k2, k3, k1, k4}, 4, false},
			// etcd sorts ascending when a target is given without an order.
			{"sort target without order", sqlstore.RangeRequest{Key: K, End: L, SortTarget: sqlstore.SortByVersion}, []sqlstore.KeyValue{k3, k1, k4, k2}, 4, false},

			{"min mod", sqlstore.RangeRequest{Key: K, End: L, MinModRevision: 10}, []sqlstore.KeyValue{k1, k4}, 4, false},
			{"max mod", sqlstore.RangeRequest{Key: K, End: L, MaxModRevision: 9}, []sqlstore.KeyValue{k2, k3}, 4, false},
			{"min and max mod", sqlstore.RangeRequest{Key: K, End: L, MinModRevision: 6, MaxModRevision: 10}, []sqlstore.KeyValue{k2, k4}, 4, false},
			{"min create", sqlstore.RangeRequest{Key: K, End: L, MinCreateRevision: 4}, []sqlstore.KeyValue{k1, k3}, 4, false},
			{"max create", sqlstore.RangeRequest{Key: K, End: L, MaxCreateRevision: 3}, []sqlstore.KeyValue{k2, k4}, 4, false},
			{"min and max create", sqlstore.RangeRequest{Key: K, End: L, MinCreateRevision: 3, MaxCreateRevision: 4}, []sqlstore.KeyValue{k1, k4}, 4, false},
			{"filter matches nothing", sqlstore.RangeRequest{Key: K, End: L, MinModRevision: 12}, nil, 4, false},
			{"filter, sort and limit", sqlstore.RangeRequest{Key: K, End: L, MinModRevision: 9, SortTarget: sqlstore.SortByMod, SortOrder: sqlstore.SortDescend, Limit: 2}, []sqlstore.KeyValue{k1, k4}, 4, true},
			{"filter and limit", sqlstore.RangeRequest{Key: K, End: L, MaxCreateRevision: 4, Limit: 1}, []sqlstore.KeyValue{k1}, 4, true},

			{"historical prefix", sqlstore.RangeRequest{Key: K, End: L, Revision: 7}, m.rangeAt(7, "k", "l"), 4, false},
			{"historical limit", sqlstore.RangeRequest{Key: K, End: L, Revision: 7, Limit: 2}, m.rangeAt(7, "k", "l")[:2], 4, true},
			{"historical descend limit", sqlstore.RangeRequest{Key: K, End: L, Revision: 4, Limit: 1, SortOrder: sqlstore.SortDescend}, m.rangeAt(4, "k4", "")[:1], 3, true},
			{"historical sort by mod", sqlstore.RangeRequest{Key: K, End: L, Revision: 8, SortTarget: sqlstore.SortByMod, SortOrder: sqlstore.SortDescend},
				[]sqlstore.KeyValue{kv("k4", "k4@7", 3, 8, 2, 0), kv("k2", "k2@6", 2, 7, 3, 0), kv("k3", "c", 5, 5, 1, 0), kv("k1", "k1@3", 4, 4, 1, 0)}, 4, false},
			{"historical min mod", sqlstore.RangeRequest{Key: K, End: L, Revision: 8, MinModRevision: 6}, []sqlstore.KeyValue{kv("k2", "k2@6", 2, 7, 3, 0), kv("k4", "k4@7", 3, 8, 2, 0)}, 4, false},
			{"historical from key", sqlstore.RangeRequest{Key: []byte("k3"), End: []byte{0}, Revision: 3}, []sqlstore.KeyValue{kv("k4", "k4@2", 3, 3, 1, 0)}, 1, false},
			{"revision 0 reads the current one", sqlstore.RangeRequest{Key: K, End: L, Revision: 0}, []sqlstore.KeyValue{k1, k2, k3, k4}, 4, false},
			{"at current revision", sqlstore.RangeRequest{Key: K, End: L, Revision: 12}, []sqlstore.KeyValue{k1, k2, k3, k4}, 4, false},
			{"historical single key", sqlstore.RangeRequest{Key: []byte("k2"), Revision: 6}, []sqlstore.KeyValue{kv("k2", "k2@5", 2, 6, 2, 0)}, 1, false},
			{"historical before creation", sqlstore.RangeRequest{Key: []byte("k3"), Revision: 4}, nil, 0, false},
			{"at the empty store's revision", sqlstore.RangeRequest{Key: K, End: L, Revision: 1}, nil, 0, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res := rng(t, s, tt.req)
				checkKVs(t, "KVs", res.KVs, tt.want)
				if res.Count != tt.wantCount {
					t.Errorf("Count: got %d, want %d", res.Count, tt.wantCount)
				}
				if res.More != tt.wantMore {
					t.Errorf("More: got %v, want %v", res.More, tt.wantMore)
				}
				if res.Revision != 12 {
					t.Errorf("Revision: got %d, want the current revision 12", res.Revision)
				}

				// The same request with KeysOnly returns the same keys
				// without values; with CountOnly, only the count.
				keysOnly := tt.req
				keysOnly.KeysOnly = true
				if tt.req.SortTarget == sqlstore.SortByValue {
					return // without values there is nothing to sort by
				}
				ko := rng(t, s, keysOnly)
				var wantKO []sqlstore.KeyValue
				for _, kv := range tt.want {
					kv.Value = nil
					wantKO = append(wantKO, kv)
				}
				checkKVs(t, "KeysOnly KVs", ko.KVs, wantKO)
				if ko.Count != tt.wantCount || ko.More != tt.wantMore {
					t.Errorf("KeysOnly: Count %d More %v, want %d %v", ko.Count, ko.More, tt.wantCount, tt.wantMore)
				}
				countOnly := tt.req
				countOnly.CountOnly = true
				co := rng(t, s, countOnly)
				if len(co.KVs) != 0 || co.Count != tt.wantCount {
					t.Errorf("CountOnly: got %d KVs and Count %d, want none and %d", len(co.KVs), co.Count, tt.wantCount)
				}
			})
		}

		t.Run("every past revision", func(t *testing.T) {
			for rev := int64(1); rev <= m.rev; rev++ {
				res := rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, Revision: rev})
				checkKVs(t, "all keys at revision "+itoa(rev), res.KVs, m.rangeAt(rev, "\x00", "\x00"))
				if res.Count != int64(len(m.snaps[rev])) {
					t.Errorf("count at revision %d: got %d, want %d", rev, res.Count, len(m.snaps[rev]))
				}
			}
		})

		t.Run("future revision", func(t *testing.T) {
			_, err := s.Range(context.Background(), sqlstore.RangeRequest{Key: K, End: L, Revision: 13})
			checkErr(t, "range at revision 13 of 12", err, sqlstore.ErrFutureRevision)
			_, err = s.Range(context.Background(), sqlstore.RangeRequest{Key: K, Revision: 1 << 40})
			checkErr(t, "range far in the future", err, sqlstore.ErrFutureRevision)
		})
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// binaryKeys are keys SQL likes to mangle: LIKE wildcards, escapes, quotes,
// NUL and high bytes, case and trailing-space variants.
var binaryKeys = []string{
	"100%", "1_0", "%", "_", `\`, `a\b`, `a\%`, "it's", `say "hi"`, "''", "nul\x00mid", "\x00lead", "trail\x00",
	"\xff", "\xff\xff", "\xfe", "\xff\x00", "a", "A", "a ", "b", "B", "é", "\xc3", "\x80\x81", "ß", "ss",
}

func TestStore_BinaryKeys(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		w, rec := watch(t, s, []byte{0}, []byte{0}, 1)

		values := map[string][]byte{}
		for i, k := range binaryKeys {
			v := make([]byte, 64+i)
			if _, err := rand.Read(v); err != nil {
				t.Fatal(err)
			}
			v[0], v[1], v[len(v)-1] = 0x00, 0xff, 0x00 // leading NUL and high byte, trailing NUL
			values[k] = v
			if _, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(k), Value: v}); err != nil || rev != int64(i+2) {
				t.Fatalf("Put(%q): revision %d, error %v; want %d, nil", k, rev, err, i+2)
			}
		}
		// A value of 1 MiB with every byte value.
		big := make([]byte, 1<<20)
		for i := range big {
			big[i] = byte(i * 7)
		}
		values["big"] = big
		lastRev := put(t, s, "big", string(big))
		n := len(binaryKeys) + 1 // keys

		sorted := append(append([]string(nil), binaryKeys...), "big")
		sort.Strings(sorted) // Go compares strings bytewise

		t.Run("single keys", func(t *testing.T) {
			for i, k := range binaryKeys {
				got := get(t, s, k)
				want := sqlstore.KeyValue{Key: []byte(k), Value: values[k], CreateRevision: int64(i + 2), ModRevision: int64(i + 2), Version: 1}
				checkKV(t, "key "+strconv.Quote(k), got, &want)
			}
			got := get(t, s, "big")
			if got == nil || !bytes.Equal(got.Value, big) {
				t.Errorf("1 MiB value did not round-trip")
			}
		})

		t.Run("case and trailing space are distinct keys", func(t *testing.T) {
			for _, pair := range [][2]string{{"a", "A"}, {"a", "a "}, {"b", "B"}, {"ß", "ss"}, {"\xff", "\xff\x00"}} {
				x, y := get(t, s, pair[0]), get(t, s, pair[1])
				if x == nil || y == nil || bytes.Equal(x.Value, y.Value) || x.ModRevision == y.ModRevision {
					t.Errorf("%q and %q are not distinct keys: %s / %s", pair[0], pair[1], kvString(x), kvString(y))
				}
			}
		})

		t.Run("ranges are bytewise", func(t *testing.T) {
			ranges := [][2]string{
				{"\x00", "\x00"}, {"a", "b"}, {"A", "a"}, {"%", "&"}, {"1", "2"}, {"_", "`"}, {"\xfe", "\x00"},
				{"\xff", "\xff\x01"}, {"\xff", "\x00"}, {"a\\", "a]"}, {"nul", "num"}, {"\x00", "\x01"}, {"\x80", "\xff"},
				{"it", "iu"}, {"'", "("}, {"sa", "sb"},
			}
			for _, r := range ranges {
				var want []string
				for _, k := range sorted {
					if k >= r[0] && (r[1] == "\x00" || k < r[1]) {
						want = append(want, k)
					}
				}
				res := rng(t, s, sqlstore.RangeRequest{Key: []byte(r[0]), End: []byte(r[1])})
				checkStrings(t, "range ["+strconv.Quote(r[0])+", "+strconv.Quote(r[1])+")", quoteAll(keyStrings(res.KVs)), quoteAll(want))
				for _, kv := range res.KVs {
					if !bytes.Equal(kv.Value, values[string(kv.Key)]) {
						t.Errorf("value of %q changed in a range", kv.Key)
					}
				}
				if res.Count != int64(len(want)) {
					t.Errorf("range [%q, %q): count %d, want %d", r[0], r[1], res.Count, len(want))
				}
				// Descending by key is the exact reverse.
				desc := rng(t, s, sqlstore.RangeRequest{Key: []byte(r[0]), End: []byte(r[1]), SortOrder: sqlstore.SortDescend, KeysOnly: true})
				rev := make([]string, len(want))
				for i, k := range want {
					rev[len(want)-1-i] = k
				}
				checkStrings(t, "descending range ["+strconv.Quote(r[0])+", "+strconv.Quote(r[1])+")", quoteAll(keyStrings(desc.KVs)), quoteAll(rev))
				// A historical read sees the same keys.
				hist := rng(t, s, sqlstore.RangeRequest{Key: []byte(r[0]), End: []byte(r[1]), Revision: lastRev - 1, KeysOnly: true})
				var wantHist []string
				for _, k := range want {
					if k != "big" {
						wantHist = append(wantHist, k)
					}
				}
				checkStrings(t, "historical range ["+strconv.Quote(r[0])+", "+strconv.Quote(r[1])+")", quoteAll(keyStrings(hist.KVs)), quoteAll(wantHist))
			}
		})

		t.Run("sort by value is bytewise", func(t *testing.T) {
			res := rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, SortTarget: sqlstore.SortByValue, SortOrder: sqlstore.SortAscend})
			if len(res.KVs) != n {
				t.Fatalf("got %d keys, want %d", len(res.KVs), n)
			}
			for i := 1; i < len(res.KVs); i++ {
				if bytes.Compare(res.KVs[i-1].Value, res.KVs[i].Value) > 0 {
					t.Errorf("value of %q sorts after value of %q", res.KVs[i-1].Key, res.KVs[i].Key)
				}
			}
		})

		t.Run("compare and delete binary keys", func(t *testing.T) {
			for _, k := range []string{"nul\x00mid", "%", "A", "\xff"} {
				res, err := s.Txn(ctx, &sqlstore.TxnRequest{
					Compare: []sqlstore.Compare{{Key: []byte(k), Target: sqlstore.CompareValue, Result: sqlstore.CompareEqual, Value: values[k]}},
				})
				if err != nil || !res.Succeeded {
					t.Errorf("compare value of %q: succeeded %v, error %v; want true, nil", k, res != nil && res.Succeeded, err)
				}
			}
			// Deleting "%" and "A" must not touch "100%", "a" or anything a
			// pattern or a case-folding comparison would match.
			dr, _, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte("%")})
			if err != nil || dr.Deleted != 1 {
				t.Fatalf("delete %q: deleted %v, error %v", "%", dr, err)
			}
			dr, _, err = s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte("A")})
			if err != nil || dr.Deleted != 1 {
				t.Fatalf("delete %q: deleted %v, error %v", "A", dr, err)
			}
			for _, k := range []string{"100%", "a", "a ", "_"} {
				if get(t, s, k) == nil {
					t.Errorf("key %q vanished with a delete of another key", k)
				}
			}
		})

		t.Run("watch delivers exact bytes", func(t *testing.T) {
			waitSent(t, w, lastRev)
			evs := rec.events()
			if len(evs) < n {
				t.Fatalf("got %d events, want at least %d", len(evs), n)
			}
			for i, k := range binaryKeys {
				ev := evs[i]
				if string(ev.KV.Key) != k || !bytes.Equal(ev.KV.Value, values[k]) || ev.KV.ModRevision != int64(i+2) {
					t.Errorf("event %d: got key %q at revision %d, want %q at %d with its value", i, ev.KV.Key, ev.KV.ModRevision, k, i+2)
				}
			}
		})
	})
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

func TestStore_PutOptions(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))

		res, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("v1"), PrevKV: true})
		if err != nil || rev != 2 {
			t.Fatalf("first put: revision %d, error %v", rev, err)
		}
		checkKV(t, "PrevKV of a new key", res.PrevKV, nil)

		res, rev, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("v2"), PrevKV: true})
		if err != nil || rev != 3 {
			t.Fatalf("second put: revision %d, error %v", rev, err)
		}
		checkKV(t, "PrevKV", res.PrevKV, ptr(kv("k", "v1", 2, 2, 1, 0)))

		res, _, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("v3")})
		if err != nil || res.PrevKV != nil {
			t.Errorf("put without PrevKV: PrevKV %s, error %v; want none", kvString(res.PrevKV), err)
		}
		checkRev(t, s, 4)

		t.Run("missing key", func(t *testing.T) {
			_, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("missing"), IgnoreValue: true})
			checkErr(t, "IgnoreValue on a missing key", err, sqlstore.ErrKeyNotFound)
			_, _, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("missing"), Value: []byte("x"), IgnoreLease: true})
			checkErr(t, "IgnoreLease on a missing key", err, sqlstore.ErrKeyNotFound)
			_, _, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("missing"), Value: []byte("x"), Lease: 12345})
			checkErr(t, "put with an unknown lease", err, sqlstore.ErrLeaseNotFound)
			checkRev(t, s, 4)
			checkKV(t, "missing", get(t, s, "missing"), nil)
		})

		lease, err := s.LeaseGrant(ctx, 77, 60)
		if err != nil {
			t.Fatalf("LeaseGrant: %v", err)
		}
		put(t, s, "leased", "lv") // rev 5
		if _, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("leased"), Value: []byte("lv2"), Lease: lease.ID}); err != nil || rev != 6 {
			t.Fatalf("put with lease: revision %d, error %v", rev, err)
		}
		checkKV(t, "leased", get(t, s, "leased"), ptr(kv("leased", "lv2", 5, 6, 2, 77)))

		t.Run("IgnoreValue", func(t *testing.T) {
			// IgnoreValue keeps the value; the lease is the request's.
			res, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("leased"), IgnoreValue: true, PrevKV: true})
			if err != nil || rev != 7 {
				t.Fatalf("IgnoreValue: revision %d, error %v", rev, err)
			}
			checkKV(t, "PrevKV", res.PrevKV, ptr(kv("leased", "lv2", 5, 6, 2, 77)))
			checkKV(t, "after IgnoreValue", get(t, s, "leased"), ptr(kv("leased", "lv2", 5, 7, 3, 0)))
		})

		t.Run("IgnoreLease", func(t *testing.T) {
			put8 := sqlstore.PutRequest{Key: []byte("leased"), Value: []byte("lv3"), Lease: lease.ID}
			if _, _, err := s.Put(ctx, put8); err != nil {
				t.Fatal(err)
			}
			_, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("leased"), Value: []byte("lv4"), IgnoreLease: true})
			if err != nil || rev != 9 {
				t.Fatalf("IgnoreLease: revision %d, error %v", rev, err)
			}
			checkKV(t, "after IgnoreLease", get(t, s, "leased"), ptr(kv("leased", "lv4", 5, 9, 5, 77)))
			// Both at once: a touch that keeps everything but bumps the
			// revision.
			_, rev, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("leased"), IgnoreValue: true, IgnoreLease: true})
			if err != nil || rev != 10 {
				t.Fatalf("IgnoreValue and IgnoreLease: revision %d, error %v", rev, err)
			}
			checkKV(t, "after touch", get(t, s, "leased"), ptr(kv("leased", "lv4", 5, 10, 6, 77)))
		})

		t.Run("lease attached keys", func(t *testing.T) {
			ttl, err := s.LeaseTimeToLive(ctx, lease.ID, true)
			if err != nil {
				t.Fatal(err)
			}
			checkStrings(t, "lease keys", bytesStrings(ttl.Keys), []string{"leased"})
		})
	})
}

func bytesStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func TestStore_DeleteRange(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		m := newModel()
		for _, k := range []string{"a", "p/1", "p/2", "p/3", "q", "r", "s"} {
			m.put(t, s, k, "v-"+k)
		}
		m.put(t, s, "p/2", "v-p/2'") // rev 9

		t.Run("single key with PrevKV", func(t *testing.T) {
			res, rev, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte("a"), PrevKV: true})
			if err != nil || rev != 10 || res.Deleted != 1 {
				t.Fatalf("delete a: revision %d deleted %v error %v; want 10, 1, nil", rev, res, err)
			}
			checkKVs(t, "PrevKVs", res.PrevKVs, []sqlstore.KeyValue{kv("a", "v-a", 2, 2, 1, 0)})
			checkKV(t, "a after delete", get(t, s, "a"), nil)
			checkKV(t, "a before delete", getAt(t, s, "a", 9), ptr(kv("a", "v-a", 2, 2, 1, 0)))
		})

		t.Run("prefix at one revision", func(t *testing.T) {
			res, rev, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte("p/"), End: []byte("p0"), PrevKV: true})
			if err != nil || rev != 11 || res.Deleted != 3 {
				t.Fatalf("delete p/: revision %d deleted %v error %v; want 11, 3, nil", rev, res, err)
			}
			checkKVs(t, "PrevKVs", res.PrevKVs, []sqlstore.KeyValue{kv("p/1", "v-p/1", 3, 3, 1, 0), kv("p/2", "v-p/2'", 4, 9, 2, 0), kv("p/3", "v-p/3", 5, 5, 1, 0)})
			if got := rng(t, s, sqlstore.RangeRequest{Key: []byte("p/"), End: []byte("p0")}); got.Count != 0 {
				t.Errorf("prefix after delete: count %d, want 0", got.Count)
			}
			if got := rng(t, s, sqlstore.RangeRequest{Key: []byte("p/"), End: []byte("p0"), Revision: 10}); got.Count != 3 {
				t.Errorf("prefix before delete: count %d, want 3", got.Count)
			}
		})

		t.Run("nothing to delete", func(t *testing.T) {
			for _, req := range []sqlstore.DeleteRequest{
				{Key: []byte("a"), PrevKV: true},
				{Key: []byte("p/"), End: []byte("p0")},
				{Key: []byte("zz"), End: []byte{0}},
				{Key: []byte("s"), End: []byte("r")},
			} {
				res, rev, err := s.DeleteRange(ctx, req)
				if err != nil || rev != 11 || res.Deleted != 0 || len(res.PrevKVs) != 0 {
					t.Errorf("DeleteRange(%q, %q): revision %d, result %+v, error %v; want revision 11 and nothing deleted", req.Key, req.End, rev, res, err)
				}
			}
			checkRev(t, s, 11)
		})

		t.Run("from key without PrevKV", func(t *testing.T) {
			res, rev, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte("r"), End: []byte{0}})
			if err != nil || rev != 12 || res.Deleted != 2 || res.PrevKVs != nil {
				t.Fatalf("delete from r: revision %d result %+v error %v; want 12, 2 deleted, no PrevKVs", rev, res, err)
			}
			checkStrings(t, "left", keyStrings(rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}}).KVs), []string{"q"})
		})

		t.Run("recreate", func(t *testing.T) {
			if rev := put(t, s, "p/2", "new"); rev != 13 {
				t.Fatalf("recreate: revision %d, want 13", rev)
			}
			checkKV(t, "recreated key", get(t, s, "p/2"), ptr(kv("p/2", "new", 13, 13, 1, 0)))
		})

		t.Run("empty key", func(t *testing.T) {
			_, _, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{})
			checkErr(t, "delete without key", err, sqlstore.ErrEmptyKey)
		})

		t.Run("everything from the empty key", func(t *testing.T) {
			put(t, s, "\x00", "nul") // rev 14
			res, rev, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{End: []byte{0}})
			if err != nil || rev != 15 || res.Deleted != 3 {
				t.Fatalf("delete all: revision %d result %+v error %v; want 15, 3 deleted", rev, res, err)
			}
			if got := rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}}); got.Count != 0 {
				t.Errorf("after deleting everything: count %d", got.Count)
			}
		})
	})
}
