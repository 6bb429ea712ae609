package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// The expected outputs below are etcdctl 3.4's (Debian etcd-client).

// revs numbers the writes of a test: a fresh store need not start at
// revision 0 (etcd starts at 1), so revisions are counted from the one the
// test found.
type revs int64

// at is the revision of the test's n-th write.
func (r revs) at(n int64) int64 { return int64(r) + n }

// s is at(n) as etcdctl takes it.
func (r revs) s(n int64) string { return strconv.FormatInt(r.at(n), 10) }

// putAll writes key=value pairs in order, one revision each.
func putAll(t *testing.T, s *server, kvs ...string) {
	t.Helper()
	for i := 0; i < len(kvs); i += 2 {
		wantOutput(t, "put "+kvs[i], s.ctl(t, "put", kvs[i], kvs[i+1]), "OK")
	}
}

func TestEtcdctl_PutGet(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServer(t, b.NewDSN(t))
		r := revs(s.revision(t))
		// Writes 1..5; k/b is written twice.
		putAll(t, s, "k/a", "va", "k/b", "vb", "k/c", "vc", "k/b", "vb2", "z", "vz")

		wantOutput(t, "get k/a", s.ctl(t, "get", "k/a"), "k/a", "va")
		wantOutput(t, "get missing", s.ctl(t, "get", "k/missing"))
		wantOutput(t, "get --prefix", s.ctl(t, "get", "k/", "--prefix"), "k/a", "va", "k/b", "vb2", "k/c", "vc")
		wantOutput(t, "get range", s.ctl(t, "get", "k/a", "k/c"), "k/a", "va", "k/b", "vb2")
		wantOutput(t, "get --from-key", s.ctl(t, "get", "k/b", "--from-key"), "k/b", "vb2", "k/c", "vc", "z", "vz")
		wantOutput(t, "get --rev 2", s.ctl(t, "get", "k/", "--prefix", "--rev", r.s(2)), "k/a", "va", "k/b", "vb")
		wantOutput(t, "get --rev 3 k/b", s.ctl(t, "get", "k/b", "--rev", r.s(3)), "k/b", "vb")
		wantOutput(t, "get --rev 1 k/b", s.ctl(t, "get", "k/b", "--rev", r.s(1)))
		wantOutput(t, "get --sort-by=MODIFY --order=DESCEND",
			s.ctl(t, "get", "k/", "--prefix", "--sort-by=MODIFY", "--order=DESCEND"), "k/b", "vb2", "k/c", "vc", "k/a", "va")
		wantOutput(t, "get --sort-by=VERSION --order=DESCEND",
			s.ctl(t, "get", "k/", "--prefix", "--sort-by=VERSION", "--order=DESCEND", "--limit=1"), "k/b", "vb2")
		wantOutput(t, "get --sort-by=CREATE --order=ASCEND",
			s.ctl(t, "get", "k/", "--prefix", "--sort-by=CREATE", "--order=ASCEND"), "k/a", "va", "k/b", "vb2", "k/c", "vc")
		wantOutput(t, "get --sort-by=VALUE --order=DESCEND",
			s.ctl(t, "get", "", "--from-key", "--sort-by=VALUE", "--order=DESCEND"), "z", "vz", "k/c", "vc", "k/b", "vb2", "k/a", "va")
		wantOutput(t, "get --order=DESCEND", s.ctl(t, "get", "k/", "--prefix", "--order=DESCEND"), "k/c", "vc", "k/b", "vb2", "k/a", "va")
		wantOutput(t, "get --limit 2", s.ctl(t, "get", "k/", "--prefix", "--limit", "2"), "k/a", "va", "k/b", "vb2")
		// etcdctl prints an empty value line after each key.
		wantOutput(t, "get --keys-only", s.ctl(t, "get", "k/", "--prefix", "--keys-only"), "k/a", "", "k/b", "", "k/c", "")
		wantOutput(t, "get --print-value-only", s.ctl(t, "get", "k/", "--prefix", "--print-value-only"), "va", "vb2", "vc")

		// etcdctl 3.4 has no --count-only; the count of a limited range
		// is the same figure (every key in the range, before the limit).
		var limited pb.RangeResponse
		s.ctlJSON(t, &limited, "get", "k/", "--prefix", "--limit", "1")
		if limited.Count != 3 || !limited.More || len(limited.Kvs) != 1 || string(limited.Kvs[0].Key) != "k/a" {
			t.Errorf("get --limit 1 -w json: count %d more %v kvs %v; want count 3, more, [k/a]", limited.Count, limited.More, limited.Kvs)
		}

		var resp pb.RangeResponse
		s.ctlJSON(t, &resp, "get", "k/b")
		if resp.Header.Revision != r.at(5) {
			t.Errorf("header revision %d, want %d", resp.Header.Revision, r.at(5))
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("get k/b -w json: %d kvs, want 1", len(resp.Kvs))
		}
		got := resp.Kvs[0]
		want := &mvccpb.KeyValue{Key: []byte("k/b"), Value: []byte("vb2"), CreateRevision: r.at(2), ModRevision: r.at(4), Version: 2}
		if got.String() != want.String() {
			t.Errorf("get k/b -w json: %v, want %v", got, want)
		}

		if errOut := s.ctlFail(t, "get", "k/a", "--rev", "100"); !strings.Contains(errOut, "required revision is a future revision") {
			t.Errorf("get --rev 100: stderr %q, want the future revision error", errOut)
		}

		// put --prev-kv prints the previous value; a value can be binary.
		wantOutput(t, "put --prev-kv", s.ctl(t, "put", "k/a", "va2", "--prev-kv"), "OK", "k/a", "va")
		var prev pb.PutResponse
		s.ctlJSON(t, &prev, "put", "k/a", "va3", "--prev-kv")
		if prev.PrevKv == nil || string(prev.PrevKv.Value) != "va2" || prev.PrevKv.ModRevision != r.at(6) || prev.Header.Revision != r.at(7) {
			t.Errorf("put --prev-kv -w json: %v, want prev value va2 of write 6, header at write 7", &prev)
		}
	})
}

func TestEtcdctl_Del(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServer(t, b.NewDSN(t))
		r := revs(s.revision(t))
		putAll(t, s, "d/a", "1", "d/b", "2", "d/c", "3", "e/a", "4", "d/a", "5")

		wantOutput(t, "del missing", s.ctl(t, "del", "d/missing"), "0")
		wantOutput(t, "del d/c", s.ctl(t, "del", "d/c"), "1")
		wantOutput(t, "get after del", s.ctl(t, "get", "d/c"))
		wantOutput(t, "del --prefix --prev-kv", s.ctl(t, "del", "d/", "--prefix", "--prev-kv"), "2", "d/a", "5", "d/b", "2")
		wantOutput(t, "get after del --prefix", s.ctl(t, "get", "", "--from-key"), "e/a", "4")

		putAll(t, s, "f/a", "1", "f/b", "2")
		var resp pb.DeleteRangeResponse
		s.ctlJSON(t, &resp, "del", "f/", "--prefix", "--prev-kv")
		if resp.Deleted != 2 || len(resp.PrevKvs) != 2 || resp.Header.Revision != r.at(10) {
			t.Fatalf("del --prefix --prev-kv -w json: %v, want 2 deleted at write 10", &resp)
		}
		for i, want := range []*mvccpb.KeyValue{
			{Key: []byte("f/a"), Value: []byte("1"), CreateRevision: r.at(8), ModRevision: r.at(8), Version: 1},
			{Key: []byte("f/b"), Value: []byte("2"), CreateRevision: r.at(9), ModRevision: r.at(9), Version: 1},
		} {
			if resp.PrevKvs[i].String() != want.String() {
				t.Errorf("prev_kvs[%d] = %v, want %v", i, resp.PrevKvs[i], want)
			}
		}

		// Deleted keys are still readable at older revisions.
		wantOutput(t, "get --rev before del", s.ctl(t, "get", "d/", "--prefix", "--rev", r.s(5)), "d/a", "5", "d/b", "2", "d/c", "3")
		wantOutput(t, "del --from-key", s.ctl(t, "del", "", "--from-key"), "1")
		wantOutput(t, "get everything", s.ctl(t, "get", "", "--from-key"))
	})
}

func TestEtcdctl_Txn(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServer(t, b.NewDSN(t))
		r := revs(s.revision(t))
		putAll(t, s, "t/a", "1", "t/b", "2", "t/b", "3")

		// etcdctl txn reads compares, a blank line, success ops, a blank
		// line, failure ops, a blank line.
		success := strings.Join([]string{
			`value("t/a") = "1"`,
			`version("t/b") = "2"`,
			`mod("t/b") > "2"`,
			`create("t/missing") = "0"`,
			``,
			`put t/c "new value"`,
			`get t/b`,
			`del t/a`,
			``,
			`put t/failed yes`,
			``,
		}, "\n") + "\n"
		wantOutput(t, "txn (success)", s.ctlStdin(t, success, "txn"),
			"SUCCESS", "", "OK", "", "t/b", "3", "", "1")
		wantOutput(t, "after success", s.ctl(t, "get", "t/", "--prefix"), "t/b", "3", "t/c", "new value")
		var after pb.RangeResponse
		s.ctlJSON(t, &after, "get", "t/c")
		if after.Header.Revision != r.at(4) || len(after.Kvs) != 1 || after.Kvs[0].ModRevision != r.at(4) {
			t.Errorf("txn wrote at %v, want one revision (%d) for the whole txn", &after, r.at(4))
		}

		failure := strings.Join([]string{
			`value("t/b") = "3"`,
			`value("t/c") != "new value"`,
			``,
			`put t/unexpected 1`,
			``,
			`get t/c`,
			`put t/d 4`,
			`del t/b`,
			``,
		}, "\n") + "\n"
		wantOutput(t, "txn (failure)", s.ctlStdin(t, failure, "txn"),
			"FAILURE", "", "t/c", "new value", "", "OK", "", "1")
		wantOutput(t, "after failure", s.ctl(t, "get", "t/", "--prefix"), "t/c", "new value", "t/d", "4")

		// A txn that only reads does not move the revision.
		readOnly := "\nget t/d\n\n\n"
		wantOutput(t, "txn (no compares)", s.ctlStdin(t, readOnly, "txn"), "SUCCESS", "", "t/d", "4")
		if rev := s.revision(t); rev != r.at(5) {
			t.Errorf("revision after a read-only txn is %d, want %d", rev, r.at(5))
		}

		var resp pb.TxnResponse
		if out := s.ctlStdin(t, "\n\n\n", "txn", "-w", "json"); json.Unmarshal([]byte(out), &resp) != nil {
			t.Fatalf("txn -w json printed %q", out)
		}
		if !resp.Succeeded || resp.Header.Revision != r.at(5) {
			t.Errorf("empty txn -w json: %v, want success at revision %d", &resp, r.at(5))
		}
	})
}

// syncWatch makes sure a watch without a start revision is established: it
// writes key until the watch prints its event.
func syncWatch(t *testing.T, s *server, w *watchProc, key string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for i := 0; ; i++ {
		s.ctl(t, "put", key, strconv.Itoa(i))
		select {
		case line, ok := <-w.lines:
			if !ok {
				t.Fatalf("etcdctl watch ended:\n%s", w.stderr)
			}
			if line != "PUT" {
				t.Fatalf("watch printed %q, want PUT", line)
			}
			if k := w.next(t, deadline); k != key {
				t.Fatalf("watch printed key %q, want %q", k, key)
			}
			w.next(t, deadline) // value
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch printed nothing within %v", waitFor)
		}
	}
}

// nextEvent reads one event of a simple-format watch without --prev-kv,
// skipping the events of skipKey.
func nextEvent(t *testing.T, w *watchProc, skipKey string) [3]string {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ev := [3]string{w.next(t, deadline), w.next(t, deadline), w.next(t, deadline)}
		if ev[1] != skipKey {
			return ev
		}
	}
}

func TestEtcdctl_Watch(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServer(t, b.NewDSN(t))
		r := revs(s.revision(t))
		putAll(t, s, "w/a", "1", "w/b", "2", "x/a", "3", "w/a", "4") // writes 1..4
		wantOutput(t, "del w/b", s.ctl(t, "del", "w/b"), "1")        // write 5

		t.Run("json", func(t *testing.T) {
			w := s.startWatch(t, "w/b", "--rev="+r.s(1), "-w", "json")
			deadline := time.Now().Add(waitFor)
			var events []*mvccpb.Event
			for len(events) < 2 {
				var resp struct {
					Header          pb.ResponseHeader
					Events          []*mvccpb.Event
					CompactRevision int64
					Canceled        bool
				}
				line := w.next(t, deadline)
				if err := json.Unmarshal([]byte(line), &resp); err != nil {
					t.Fatalf("watch -w json printed %q: %v", line, err)
				}
				if resp.Canceled || resp.CompactRevision != 0 {
					t.Fatalf("watch canceled: %s", line)
				}
				if resp.Header.Revision < r.at(5) {
					t.Errorf("watch response header revision %d, want >= %d (the store's revision when it was sent)", resp.Header.Revision, r.at(5))
				}
				events = append(events, resp.Events...)
			}
			want := []*mvccpb.Event{
				{Type: mvccpb.Event_PUT, Kv: &mvccpb.KeyValue{Key: []byte("w/b"), Value: []byte("2"), CreateRevision: r.at(2), ModRevision: r.at(2), Version: 1}},
				{Type: mvccpb.Event_DELETE, Kv: &mvccpb.KeyValue{Key: []byte("w/b"), ModRevision: r.at(5)}},
			}
			if len(events) != len(want) {
				t.Fatalf("watch -w json: %d events, want %d: %v", len(events), len(want), events)
			}
			for i := range want {
				if events[i].String() != want[i].String() {
					t.Errorf("event %d = %v, want %v", i, events[i], want[i])
				}
			}
		})

		t.Run("rev", func(t *testing.T) {
			// History from revision 2 is replayed, then live events follow.
			w := s.startWatch(t, "w/", "--prefix", "--rev="+r.s(2))
			w.expect(t, "PUT", "w/b", "2", "PUT", "w/a", "4", "DELETE", "w/b", "")
			rev := s.revision(t)
			putAll(t, s, "w/d", "8")
			w.expect(t, "PUT", "w/d", "8")
			var resp pb.RangeResponse
			s.ctlJSON(t, &resp, "get", "w/d")
			if resp.Kvs[0].ModRevision != rev+1 {
				t.Errorf("w/d written at %d, want %d", resp.Kvs[0].ModRevision, rev+1)
			}
		})

		t.Run("prev-kv", func(t *testing.T) {
			// With --prev-kv etcdctl prints the previous key and value
			// before the new ones.
			w := s.startWatch(t, "w/a", "--rev="+r.s(1), "--prev-kv")
			w.expect(t, "PUT", "w/a", "1", "PUT", "w/a", "1", "w/a", "4")
			s.ctl(t, "del", "w/a")
			w.expect(t, "DELETE", "w/a", "4", "w/a", "")
		})

		t.Run("prefix", func(t *testing.T) {
			w := s.startWatch(t, "w/", "--prefix")
			syncWatch(t, s, w, "w/sync")
			putAll(t, s, "w/c", "5", "x/b", "6", "w/c", "7")
			s.ctl(t, "del", "w/c")
			for _, want := range [][3]string{{"PUT", "w/c", "5"}, {"PUT", "w/c", "7"}, {"DELETE", "w/c", ""}} {
				if got := nextEvent(t, w, "w/sync"); got != want {
					t.Errorf("watch --prefix printed %q, want %q", got, want)
				}
			}
		})

	})
}

func TestEtcdctl_Lease(t *testing.T) {
	grantRE := regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\(600s\)\n$`)
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServer(t, b.NewDSN(t))
		grant := func() (int64, string) {
			t.Helper()
			out := s.ctl(t, "lease", "grant", "600")
			m := grantRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("lease grant 600 printed %q", out)
			}
			return parseLeaseHex(t, m[1]), m[1]
		}
		id1, hex1 := grant()
		id2, hex2 := grant()
		if id1 == id2 {
			t.Fatalf("two grants returned the same lease %s", hex1)
		}
		wantOutput(t, "put --lease", s.ctl(t, "put", "l/a", "1", "--lease="+hex1), "OK")
		wantOutput(t, "put --lease", s.ctl(t, "put", "l/b", "2", "--lease="+hex1), "OK")
		wantOutput(t, "put --lease", s.ctl(t, "put", "l/c", "3", "--lease="+hex2), "OK")
		wantOutput(t, "put without lease", s.ctl(t, "put", "l/d", "4"), "OK")

		var ttl struct {
			ID         int64    `json:"id"`
			TTL        int64    `json:"ttl"`
			GrantedTTL int64    `json:"granted-ttl"`
			Keys       []string `json:"keys"`
		}
		s.ctlJSON(t, &ttl, "lease", "timetolive", hex1, "--keys")
		var keys []string
		for _, k := range ttl.Keys {
			raw, err := base64.StdEncoding.DecodeString(k)
			if err != nil {
				t.Fatalf("timetolive key %q: %v", k, err)
			}
			keys = append(keys, string(raw))
		}
		if ttl.ID != id1 || ttl.GrantedTTL != 600 || ttl.TTL < 590 || ttl.TTL > 600 || strings.Join(keys, ",") != "l/a,l/b" {
			t.Errorf("timetolive --keys -w json: %+v (keys %q), want lease %d granted 600s, 590..600s left, keys l/a,l/b", ttl, keys, id1)
		}
		out := s.ctl(t, "lease", "timetolive", hex1, "--keys")
		if !regexp.MustCompile(`^lease ` + hex1 + ` granted with TTL\(600s\), remaining\((59\d|600)s\), attached keys\(\[l/a l/b\]\)\n$`).MatchString(out) {
			t.Errorf("timetolive --keys printed %q", out)
		}

		wantOutput(t, "keep-alive --once", s.ctl(t, "lease", "keep-alive", "--once", hex1), "lease "+hex1+" keepalived with TTL(600)")

		list := s.ctl(t, "lease", "list")
		want := []string{hex1, hex2}
		if id2 < id1 {
			want = []string{hex2, hex1}
		}
		wantOutput(t, "lease list", list, append([]string{"found 2 leases"}, want...)...)

		wantOutput(t, "revoke", s.ctl(t, "lease", "revoke", hex1), "lease "+hex1+" revoked")
		wantOutput(t, "keys after revoke", s.ctl(t, "get", "l/", "--prefix"), "l/c", "3", "l/d", "4")
		wantOutput(t, "timetolive after revoke", s.ctl(t, "lease", "timetolive", hex1), "lease "+hex1+" already expired")
		wantOutput(t, "lease list after revoke", s.ctl(t, "lease", "list"), "found 1 leases", hex2)
		if errOut := s.ctlFail(t, "lease", "revoke", hex1); !strings.Contains(errOut, "requested lease not found") {
			t.Errorf("second revoke: stderr %q, want lease not found", errOut)
		}
		if errOut := s.ctlFail(t, "lease", "keep-alive", "--once", hex1); !strings.Contains(errOut, "requested lease not found") {
			t.Errorf("keep-alive of a revoked lease: stderr %q, want the lease to be reported gone", errOut)
		}
		if errOut := s.ctlFail(t, "put", "l/e", "5", "--lease="+hex1); !strings.Contains(errOut, "requested lease not found") {
			t.Errorf("put with a revoked lease: stderr %q, want lease not found", errOut)
		}

		// A lease that is not kept alive expires and takes its keys along.
		out = s.ctl(t, "lease", "grant", "1")
		m := regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\(1s\)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("lease grant 1 printed %q", out)
		}
		s.ctl(t, "put", "l/short", "x", "--lease="+m[1])
		deadline := time.Now().Add(waitFor)
		for s.ctl(t, "get", "l/short") != "" {
			if time.Now().After(deadline) {
				t.Fatalf("key of a 1s lease still there after %v", waitFor)
			}
			time.Sleep(100 * time.Millisecond)
		}
		wantOutput(t, "timetolive of an expired lease", s.ctl(t, "lease", "timetolive", m[1]), "lease "+m[1]+" already expired")
		wantOutput(t, "lease list after expiry", s.ctl(t, "lease", "list"), "found 1 leases", hex2)
	})
}

func TestEtcdctl_Compaction(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServer(t, b.NewDSN(t))
		r := revs(s.revision(t))
		putAll(t, s, "c/a", "1", "c/a", "2", "c/b", "3", "c/a", "4", "c/b", "5") // writes 1..5

		wantOutput(t, "compaction 3", s.ctl(t, "compaction", r.s(3)), "compacted revision "+r.s(3))
		for _, rev := range []string{r.s(1), r.s(2)} {
			if errOut := s.ctlFail(t, "get", "c/a", "--rev", rev); !strings.Contains(errOut, "required revision has been compacted") {
				t.Errorf("get --rev %s after compaction 3: stderr %q, want the compacted error", rev, errOut)
			}
		}
		// The compacted revision itself and later ones stay readable.
		wantOutput(t, "get --rev 3", s.ctl(t, "get", "c/", "--prefix", "--rev", r.s(3)), "c/a", "2", "c/b", "3")
		wantOutput(t, "get --rev 4", s.ctl(t, "get", "c/", "--prefix", "--rev", r.s(4)), "c/a", "4", "c/b", "3")
		wantOutput(t, "get", s.ctl(t, "get", "c/", "--prefix"), "c/a", "4", "c/b", "5")

		if errOut := s.ctlFail(t, "compaction", r.s(2)); !strings.Contains(errOut, "required revision has been compacted") {
			t.Errorf("compaction 2 after 3: stderr %q, want the compacted error", errOut)
		}
		if errOut := s.ctlFail(t, "compaction", r.s(9)); !strings.Contains(errOut, "required revision is a future revision") {
			t.Errorf("compaction 9 at revision 5: stderr %q, want the future revision error", errOut)
		}

		// A watch from a compacted revision is cancelled by the server.
		out, errOut, err := s.run(t, "", "watch", "c/a", "--rev="+r.s(2))
		if err == nil || !strings.Contains(errOut, "required revision has been compacted") {
			t.Errorf("watch --rev 2 after compaction: err %v, stdout %q, stderr %q; want it cancelled as compacted", err, out, errOut)
		}
		// From above the compacted revision the history is still there.
		w := s.startWatch(t, "c/", "--prefix", "--rev="+r.s(4))
		w.expect(t, "PUT", "c/a", "4", "PUT", "c/b", "5")

		wantOutput(t, "compaction --physical 5", s.ctl(t, "compaction", "--physical", r.s(5)), "compacted revision "+r.s(5))
		if errOut := s.ctlFail(t, "get", "c/a", "--rev", r.s(4)); !strings.Contains(errOut, "required revision has been compacted") {
			t.Errorf("get --rev 4 after compaction 5: stderr %q", errOut)
		}
		wantOutput(t, "get --rev 5", s.ctl(t, "get", "c/", "--prefix", "--rev", r.s(5)), "c/a", "4", "c/b", "5")
		var st []struct {
			Status pb.StatusResponse
		}
		s.ctlJSON(t, &st, "endpoint", "status")
		if len(st) != 1 || st[0].Status.RaftIndex != uint64(r.at(5)) {
			t.Errorf("endpoint status after compaction: %+v, want raft index %d (compaction writes no revision)", st, r.at(5))
		}
	})
}

func TestEtcdctl_Maintenance(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServer(t, b.NewDSN(t))
		r := revs(s.revision(t))
		putAll(t, s, "m/a", "1", "m/b", "2", "m/a", "3")
		s.ctl(t, "del", "m/b")

		var status []struct {
			Endpoint string
			Status   *pb.StatusResponse
		}
		s.ctlJSON(t, &status, "endpoint", "status")
		if len(status) != 1 {
			t.Fatalf("endpoint status -w json: %d entries, want 1", len(status))
		}
		st := status[0].Status
		if status[0].Endpoint != s.addr || st.Version != etcdshim.Version || st.RaftIndex != uint64(r.at(4)) || st.Header.Revision != r.at(4) ||
			st.RaftAppliedIndex != uint64(r.at(4)) || st.Leader == 0 || st.Leader != st.Header.MemberId || st.DbSize <= 0 || st.RaftTerm != 1 {
			t.Errorf("endpoint status -w json: %+v; want endpoint %s, version %s, raft index = revision = %d, this member the leader, a size",
				status[0], s.addr, etcdshim.Version, r.at(4))
		}
		member := fmt.Sprintf("%x", st.Header.MemberId)
		out := s.ctl(t, "endpoint", "status")
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(s.addr+", "+member+", "+etcdshim.Version+", ") +
			`[0-9.]+ [kMG]?B, true, false, 1, ` + r.s(4) + `, ` + r.s(4) + `, \n$`).MatchString(out) {
			t.Errorf("endpoint status printed %q", out)
		}

		out, errOut, err := s.run(t, "", "endpoint", "health")
		if err != nil || !strings.HasPrefix(out+errOut, s.addr+" is healthy: successfully committed proposal: took = ") {
			t.Errorf("endpoint health: %v, output %q", err, out+errOut)
		}
		var health []struct {
			Endpoint string `json:"endpoint"`
			Health   bool   `json:"health"`
			Error    string `json:"error"`
		}
		s.ctlJSON(t, &health, "endpoint", "health")
		if len(health) != 1 || !health[0].Health || health[0].Endpoint != s.addr || health[0].Error != "" {
			t.Errorf("endpoint health -w json: %+v", health)
		}

		url := "http://" + s.addr
		wantOutput(t, "member list", s.ctl(t, "member", "list"), member+", started, e2e, "+url+", "+url+", false")
		var members pb.MemberListResponse
		s.ctlJSON(t, &members, "member", "list")
		if len(members.Members) != 1 || members.Members[0].ID != st.Header.MemberId || members.Members[0].Name != "e2e" ||
			strings.Join(members.Members[0].ClientURLs, ",") != url || members.Header.ClusterId != st.Header.ClusterId {
			t.Errorf("member list -w json: %v; want the one member %s", &members, member)
		}

		wantOutput(t, "defrag", s.ctl(t, "defrag"), "Finished defragmenting etcd member["+s.addr+"]")
		wantOutput(t, "get after defrag", s.ctl(t, "get", "m/", "--prefix"), "m/a", "3")
		wantOutput(t, "get history after defrag", s.ctl(t, "get", "m/", "--prefix", "--rev", r.s(2)), "m/a", "1", "m/b", "2")
		if rev := s.revision(t); rev != r.at(4) {
			t.Errorf("revision after defrag %d, want %d", rev, r.at(4))
		}
	})
}

func TestSqlkube_RestartKeepsState(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		dsn := b.NewDSN(t)
		s := startServer(t, dsn)
		r := revs(s.revision(t))
		putAll(t, s, "r/a", "1", "r/b", "2", "r/a", "3")
		out := s.ctl(t, "lease", "grant", "60")
		m := regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\(60s\)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("lease grant 60 printed %q", out)
		}
		lease := m[1]
		s.ctl(t, "put", "r/leased", "x", "--lease="+lease) // write 4

		// Wait until the lease has visibly run for a while, so a TTL reset
		// to 60s on restart would show.
		type ttlResp struct {
			TTL        int64    `json:"ttl"`
			GrantedTTL int64    `json:"granted-ttl"`
			Keys       []string `json:"keys"`
		}
		var before ttlResp
		deadline := time.Now().Add(waitFor)
		for {
			s.ctlJSON(t, &before, "lease", "timetolive", lease)
			if before.TTL < 60 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease TTL still %d after %v", before.TTL, waitFor)
			}
			time.Sleep(100 * time.Millisecond)
		}

		var rangeBefore pb.RangeResponse
		s.ctlJSON(t, &rangeBefore, "get", "r/", "--prefix")

		// Open watch and lease keepalive streams must not hold up a clean
		// stop. (Another lease: keeping the first one alive would reset
		// its TTL.)
		w := s.startWatch(t, "r/", "--prefix")
		syncWatch(t, s, w, "r/sync") // writes 5…
		s.ctl(t, "del", "r/sync")
		m = regexp.MustCompile(`^lease ([0-9a-f]{16}) granted`).FindStringSubmatch(s.ctl(t, "lease", "grant", "60"))
		if m == nil {
			t.Fatal("lease grant printed no lease")
		}
		ka := s.startCtl(t, "lease", "keep-alive", m[1])
		if line := ka.next(t, time.Now().Add(waitFor)); line != "lease "+m[1]+" keepalived with TTL(60)" {
			t.Fatalf("lease keep-alive printed %q", line)
		}
		if took := s.stop(t); took > 5*time.Second {
			t.Errorf("SIGTERM with open watch and keepalive streams: exit took %v, want them ended at once", took)
		}
		w.stop()
		ka.stop()

		s = startServer(t, dsn)
		var rangeAfter pb.RangeResponse
		s.ctlJSON(t, &rangeAfter, "get", "r/", "--prefix")
		if len(rangeAfter.Kvs) != len(rangeBefore.Kvs) {
			t.Fatalf("after restart %d keys, want %d", len(rangeAfter.Kvs), len(rangeBefore.Kvs))
		}
		for i := range rangeBefore.Kvs {
			if rangeAfter.Kvs[i].String() != rangeBefore.Kvs[i].String() {
				t.Errorf("after restart key %d = %v, want %v", i, rangeAfter.Kvs[i], rangeBefore.Kvs[i])
			}
		}
		rev := rangeAfter.Header.Revision
		if rev <= r.at(4) {
			t.Errorf("revision after restart %d, want the revision before the stop (> %d)", rev, r.at(4))
		}
		wantOutput(t, "history after restart", s.ctl(t, "get", "r/a", "--rev", r.s(1)), "r/a", "1")

		var after ttlResp
		s.ctlJSON(t, &after, "lease", "timetolive", lease, "--keys")
		if after.GrantedTTL != 60 || after.TTL <= 0 || after.TTL > before.TTL || len(after.Keys) != 1 {
			t.Errorf("lease after restart: %+v; want granted 60s, 0 < ttl <= %d (not reset), one key", after, before.TTL)
		}
		if list := s.ctl(t, "lease", "list"); !strings.Contains(list, "\n"+lease+"\n") || !strings.HasPrefix(list, "found 2 leases\n") {
			t.Errorf("lease list after restart: %q, want both leases", list)
		}
		wantOutput(t, "keep-alive after restart", s.ctl(t, "lease", "keep-alive", "--once", lease), "lease "+lease+" keepalived with TTL(60)")

		putAll(t, s, "r/c", "5")
		var c pb.RangeResponse
		s.ctlJSON(t, &c, "get", "r/c")
		if c.Kvs[0].ModRevision != rev+1 {
			t.Errorf("first write after restart at revision %d, want %d", c.Kvs[0].ModRevision, rev+1)
		}
	})
}
