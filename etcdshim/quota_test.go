package etcdshim_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// testQuota is the space quota of the quota tests: a few MiB above an
// empty store (whose tables take up to about 0.5 MiB on MySQL).
const testQuota = 4 << 20

// startStoreServer is startServer over a store opened with opts (the
// logger is always silent).
func startStoreServer(t *testing.T, opts sqlstore.Options) *testServer {
	t.Helper()
	ctx := testCtx(t)
	opts.Logger = zerolog.Nop()
	st, err := sqlstore.Open(ctx, opts)
	if err != nil {
		t.Fatalf("sqlstore.Open(%s): %v", opts.DSN, err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = st.Close()
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ts := &testServer{store: st, reg: prometheus.NewRegistry(), addr: l.Addr().String()}
	ts.srv = etcdshim.New(etcdshim.Options{Backend: st, Logger: zerolog.Nop(), Name: "test", ClientURLs: []string{"http://" + ts.addr},
		ClusterKey: st.Describe(), Registerer: ts.reg})
	ts.served = make(chan error, 1)
	go func() { ts.served <- ts.srv.Serve(l) }()
	t.Cleanup(func() {
		ts.stop(t)
		if !closed {
			closed = true
			if err := st.Close(); err != nil {
				t.Errorf("close store: %v", err)
			}
		}
	})
	ts.client = newClient(t, ts.addr)
	return ts
}

// findEtcdctl finds etcdctl. Without it the test is skipped, or fails under
// CI=true (make test-deps installs it).
func findEtcdctl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("etcdctl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcdctl not found (%v); CI must provide it (Debian: apt-get install etcd-client)", err)
		}
		t.Skipf("skipping: etcdctl not found (%v); install etcd-client (etcdctl 3.4) to run it", err)
	}
	return p
}

// ctlRun runs etcdctl against ts with stdin and returns what it printed.
func (ts *testServer) ctlRun(t *testing.T, bin, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--endpoints=" + ts.addr, "--dial-timeout=5s", "--command-timeout=20s"}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("etcdctl %s: no answer within %v\nstderr: %s", strings.Join(args, " "), 2*waitFor, errOut.String())
	}
	return out.String(), errOut.String(), err
}

// ctl runs etcdctl and fails the test unless it succeeds.
func (ts *testServer) ctl(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, errOut, err := ts.ctlRun(t, bin, "", args...)
	if err != nil {
		t.Fatalf("etcdctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// ctlNoSpace runs etcdctl with stdin and fails the test unless etcd's
// "database space exceeded" refuses it.
func (ts *testServer) ctlNoSpace(t *testing.T, bin, stdin string, args ...string) {
	t.Helper()
	out, errOut, err := ts.ctlRun(t, bin, stdin, args...)
	if err == nil || !strings.Contains(errOut, "etcdserver: mvcc: database space exceeded") {
		t.Fatalf("etcdctl %s: %v\nstdout: %s\nstderr: %s\nwant etcd's database space exceeded", strings.Join(args, " "), err, out, errOut)
	}
}

// endpointStatus is what `etcdctl endpoint status -w json` prints of one
// endpoint.
type endpointStatus struct {
	Endpoint string
	Status   struct {
		Header struct {
			MemberID uint64 `json:"member_id"`
		} `json:"header"`
		DbSize      int64    `json:"dbSize"`
		DbSizeInUse int64    `json:"dbSizeInUse"`
		Errors      []string `json:"errors"`
	}
}

func (ts *testServer) endpointStatus(t *testing.T, bin string) endpointStatus {
	t.Helper()
	out := ts.ctl(t, bin, "endpoint", "status", "-w", "json")
	var st []endpointStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		t.Fatalf("etcdctl endpoint status -w json: %q: %v", out, err)
	}
	return st[0]
}

func randomValue(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestQuota_Etcdctl fills a store with a small quota through the etcd API
// until it answers etcd's NOSPACE, and drives the rest as an operator
// would with etcdctl: the alarm listed and shown by endpoint status;
// reads, deletes and lease revocation still working; a disarm re-raised by
// the next write while over the quota; the alarm kept across a restart;
// compaction and defragmentation working, and writes refused until the
// disarm that follows them; and every acknowledged put still there.
func TestQuota_Etcdctl(t *testing.T) {
	bin := findEtcdctl(t)
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		dsn := b.NewDSN(t)
		ts := startStoreServer(t, sqlstore.Options{DSN: dsn, QuotaBytes: testQuota})
		c := ts.client
		ctx := testCtx(t)

		lease, err := c.Grant(ctx, 600)
		if err != nil {
			t.Fatalf("Grant: %v", err)
		}
		mustPut(t, c, "leased", "v", clientv3.WithLease(lease.ID))

		// Fill with 32 KiB values until the server refuses one.
		const valSize = 32 << 10
		acked := map[string]string{}
		for i := 0; ; i++ {
			if i == 2*testQuota/valSize {
				t.Fatalf("%d puts of %d bytes all succeeded under a quota of %d bytes", i, valSize, testQuota)
			}
			key, val := fmt.Sprintf("fill/%04d", i), randomValue(t, valSize)
			if _, err := c.Put(ctx, key, val); err != nil {
				if !errors.Is(err, rpctypes.ErrNoSpace) {
					t.Fatalf("Put(%s): %v, want %v", key, err, rpctypes.ErrNoSpace)
				}
				break
			}
			acked[key] = val
		}
		t.Logf("%d puts of %d bytes acknowledged under a quota of %d bytes", len(acked), valSize, testQuota)
		checkAcked := func(t *testing.T, c *clientv3.Client) {
			t.Helper()
			resp, err := c.Get(ctx, "fill/", clientv3.WithPrefix())
			if err != nil {
				t.Fatalf("Get fill/: %v", err)
			}
			got := map[string]string{}
			for _, kv := range resp.Kvs {
				got[string(kv.Key)] = string(kv.Value)
			}
			for key, val := range acked {
				if got[key] != val {
					t.Errorf("acknowledged put of %s lost", key)
				}
			}
		}
		checkAcked(t, c)

		st := ts.endpointStatus(t, bin)
		member := st.Status.Header.MemberID
		t.Logf("after the fill: %+v", st)
		alarm := fmt.Sprintf("memberID:%d alarm:NOSPACE", member)
		if len(st.Status.Errors) != 1 || st.Status.Errors[0] != alarm || st.Status.DbSize <= 0 || st.Status.DbSizeInUse <= 0 {
			t.Errorf("endpoint status: %+v; want errors [%s], a size", st, alarm)
		}
		// The table wraps the column: the two words are on lines of their own.
		if table := ts.ctl(t, bin, "endpoint", "status", "-w", "table"); !strings.Contains(table, fmt.Sprintf(" memberID:%d |", member)) ||
			!strings.Contains(table, " alarm:NOSPACE |") {
			t.Errorf("endpoint status -w table does not show the alarm %q:\n%s", alarm, table)
		}
		// etcdctl prints an alarm as "memberID:N alarm:NOSPACE " and a line.
		alarmLine := alarm + " \n"
		wantAlarms := func(t *testing.T, want string) {
			t.Helper()
			if got := ts.ctl(t, bin, "alarm", "list"); got != want {
				t.Errorf("etcdctl alarm list: %q, want %q", got, want)
			}
		}
		wantAlarms(t, alarmLine)

		t.Run("refused", func(t *testing.T) {
			ts.ctlNoSpace(t, bin, "", "put", "small", "v")
			ts.ctlNoSpace(t, bin, "", "lease", "grant", "60")
			_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version("small"), "=", 0)).
				Then(clientv3.OpDelete("small")).Else(clientv3.OpPut("small", "v")).Commit()
			if !errors.Is(err, rpctypes.ErrNoSpace) {
				t.Errorf("txn with a put in its else branch: %v, want %v", err, rpctypes.ErrNoSpace)
			}
		})
		t.Run("still working", func(t *testing.T) {
			if got := ts.ctl(t, bin, "get", "fill/0001", "--print-value-only"); got != acked["fill/0001"]+"\n" {
				t.Errorf("etcdctl get fill/0001: %d bytes, want the acknowledged %d", len(got), len(acked["fill/0001"])+1)
			}
			if got := ts.ctl(t, bin, "del", "fill/0000"); got != "1\n" {
				t.Errorf("etcdctl del fill/0000: %q, want 1", got)
			}
			delete(acked, "fill/0000")
			resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version("fill/0001"), ">", 0)).Then(clientv3.OpDelete("fill/0001")).Commit()
			if err != nil || !resp.Succeeded {
				t.Errorf("txn that only deletes: %v, %v", resp, err)
			}
			delete(acked, "fill/0001")
			if _, err := c.Revoke(ctx, lease.ID); err != nil {
				t.Errorf("Revoke: %v", err)
			}
			if got := ts.ctl(t, bin, "get", "leased"); got != "" {
				t.Errorf("leased key after revoke: %q", got)
			}
		})
		checkAcked(t, c)

		t.Run("disarmed while over the quota", func(t *testing.T) {
			if got := ts.ctl(t, bin, "alarm", "disarm"); got != alarmLine {
				t.Errorf("etcdctl alarm disarm: %q, want the alarm it cleared, %q", got, alarmLine)
			}
			wantAlarms(t, "")
			// The next write that does not fit raises the alarm again.
			ts.ctlNoSpace(t, bin, randomValue(t, 512<<10), "put", "big")
			wantAlarms(t, alarmLine)
		})

		// Restart on the same database, over the quota: the alarm is
		// still there, and so is every acknowledged put. (Closing a SQLite
		// store folds its WAL into the database file, which may take it
		// under the quota: the alarm refuses writes all the same.)
		ts.stop(t)
		if err := ts.store.Close(); err != nil {
			t.Fatalf("close store: %v", err)
		}
		ts = startStoreServer(t, sqlstore.Options{DSN: dsn, QuotaBytes: testQuota})
		c = ts.client
		wantAlarms(t, alarmLine)
		ts.ctlNoSpace(t, bin, "", "put", "small", "v")
		checkAcked(t, c)

		// Make room: delete, compact, defragment. The alarm still refuses
		// writes until it is disarmed.
		if got := ts.ctl(t, bin, "del", "fill/", "--prefix"); got != fmt.Sprintf("%d\n", len(acked)) {
			t.Errorf("etcdctl del fill/ --prefix: %q, want %d", got, len(acked))
		}
		rev := fmt.Sprint(ts.revision(t))
		if got := ts.ctl(t, bin, "compaction", "--physical", rev); got != "compacted revision "+rev+"\n" {
			t.Errorf("etcdctl compaction --physical %s: %q", rev, got)
		}
		// PostgreSQL's VACUUM FULL keeps rows another transaction on the
		// server may still see: defragment until the room is there.
		deadline := testCtx(t)
		for {
			if got := ts.ctl(t, bin, "defrag"); got != "Finished defragmenting etcd member["+ts.addr+"]\n" {
				t.Errorf("etcdctl defrag: %q", got)
			}
			if st := ts.endpointStatus(t, bin); st.Status.DbSize < testQuota/2 {
				break
			} else if deadline.Err() != nil {
				t.Fatalf("size after deleting, compacting and defragmenting: %d bytes", st.Status.DbSize)
			}
		}
		ts.ctlNoSpace(t, bin, "", "put", "small", "v")
		if got := ts.ctl(t, bin, "alarm", "disarm"); got != alarmLine {
			t.Errorf("etcdctl alarm disarm: %q, want %q", got, alarmLine)
		}
		wantAlarms(t, "")
		if got := ts.ctl(t, bin, "put", "small", "v"); got != "OK\n" {
			t.Errorf("etcdctl put after disarm: %q", got)
		}
		if got := ts.ctl(t, bin, "lease", "grant", "60"); !strings.Contains(got, "granted with TTL(60s)") {
			t.Errorf("etcdctl lease grant after disarm: %q", got)
		}
		if st := ts.endpointStatus(t, bin); len(st.Status.Errors) != 0 {
			t.Errorf("endpoint status after disarm: errors %q", st.Status.Errors)
		}
	})
}

// revision reads the server's current revision.
func (ts *testServer) revision(t *testing.T) int64 {
	t.Helper()
	resp, err := ts.client.Get(testCtx(t), "revision-probe")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return resp.Header.Revision
}
