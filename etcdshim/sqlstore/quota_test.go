package sqlstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// testQuota is the quota of the quota tests: a few MiB above an empty
// store (an empty store's tables take up to about 0.5 MiB on MySQL).
const testQuota = 4 << 20

// fill puts keys prefix/0000, prefix/0001, … with random values of size
// bytes until the store refuses one, and returns the values of the puts
// it acknowledged and the refusal. It fails the test if max puts all
// succeed.
func fill(t *testing.T, s *sqlstore.Store, prefix string, size, max int) (map[string][]byte, error) {
	t.Helper()
	acked := map[string][]byte{}
	for i := range max {
		key := fmt.Sprintf("%s/%04d", prefix, i)
		val := make([]byte, size)
		if _, err := rand.Read(val); err != nil { // incompressible
			t.Fatal(err)
		}
		if _, _, err := s.Put(context.Background(), sqlstore.PutRequest{Key: []byte(key), Value: val}); err != nil {
			return acked, err
		}
		acked[key] = val
	}
	t.Fatalf("%d puts of %d bytes all succeeded under a quota of %d bytes", max, size, testQuota)
	return nil, nil
}

// checkAcked fails the test unless every acknowledged put reads back.
func checkAcked(t *testing.T, s *sqlstore.Store, acked map[string][]byte) {
	t.Helper()
	for key, val := range acked {
		if got := get(t, s, key); got == nil || !bytes.Equal(got.Value, val) {
			t.Fatalf("acknowledged put of %q lost", key)
		}
	}
}

// txnPut is a txn that puts key=val in the branch it does not take (and
// deletes key in the one it does), which etcd's quota refuses all the
// same.
func txnPut(key, val string) *sqlstore.TxnRequest {
	return &sqlstore.TxnRequest{
		Compare: []sqlstore.Compare{{Key: []byte(key), Target: sqlstore.CompareVersion, Result: sqlstore.CompareEqual, Number: 0}},
		Success: []sqlstore.Op{{Delete: &sqlstore.DeleteRequest{Key: []byte(key)}}},
		Failure: []sqlstore.Op{putOp(key, val)},
	}
}

// TestQuota_Refuses fills a store to its quota: growing requests are
// refused with a QuotaError, everything else still works, nothing
// acknowledged is lost, and compaction and Defragment make room again.
func TestQuota_Refuses(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), QuotaBytes: testQuota})
		if got := s.QuotaBytes(); got != testQuota {
			t.Fatalf("QuotaBytes() = %d, want %d", got, testQuota)
		}
		if size, err := s.Size(ctx); err != nil || size <= 0 || size >= testQuota/4 {
			t.Fatalf("empty store: Size() = %d, %v; want a little", size, err)
		}
		acked, err := fill(t, s, "fill", 32<<10, 1000)
		var qe *sqlstore.QuotaError
		if !errors.As(err, &qe) || !errors.Is(err, sqlstore.ErrNoSpace) || qe.Quota != testQuota || qe.Size+putCostOf("fill/xxxx", 32<<10) < testQuota {
			t.Fatalf("put past the quota: %v, want a QuotaError (ErrNoSpace) at the quota", err)
		}
		t.Logf("%d puts of 32 KiB acknowledged before the quota of %d bytes: %v", len(acked), testQuota, err)
		checkAcked(t, s, acked)

		// Without an alarm (etcdshim raises it) a request is refused when
		// it does not fit: these are as large as the refused put.
		big := strings.Repeat("x", 32<<10)
		_, err = s.Txn(ctx, txnPut("fill/0000", big))
		checkErr(t, "txn with a put in its other branch", err, sqlstore.ErrNoSpace)
		_, err = s.Txn(ctx, &sqlstore.TxnRequest{Success: []sqlstore.Op{{Txn: &sqlstore.TxnRequest{Failure: []sqlstore.Op{putOp("nested", big)}}}}})
		checkErr(t, "txn with a nested put", err, sqlstore.ErrNoSpace)
		checkKV(t, "refused txns wrote nothing", get(t, s, "nested"), nil)

		// What cannot grow the store still works.
		if res, err := s.Txn(ctx, &sqlstore.TxnRequest{Success: []sqlstore.Op{{Delete: &sqlstore.DeleteRequest{Key: []byte("fill/0000")}}}}); err != nil || !res.Succeeded {
			t.Fatalf("txn that only deletes: %+v, %v", res, err)
		}
		delete(acked, "fill/0000")
		if res := rng(t, s, sqlstore.RangeRequest{Key: []byte("fill/"), End: []byte("fill0"), CountOnly: true}); res.Count != int64(len(acked)) {
			t.Errorf("count of filled keys: %d, want %d", res.Count, len(acked))
		}
		rev := del(t, s, "fill/", "fill0")
		if _, err := s.Compact(ctx, rev); err != nil {
			t.Fatalf("Compact: %v", err)
		}
		// PostgreSQL's VACUUM FULL keeps rows another transaction on the
		// server may still see (see TestCompact_Size).
		eventually(t, "Defragment to make room", func() (bool, error) {
			if err := s.Defragment(ctx); err != nil {
				return false, err
			}
			size, err := s.Size(ctx)
			if err == nil && size >= testQuota/2 {
				err = fmt.Errorf("size %d bytes after compaction and Defragment", size)
			}
			return err == nil, err
		})
		put(t, s, "after", "room again")
		if _, err := s.LeaseGrant(ctx, 0, 60); err != nil {
			t.Errorf("lease grant with room again: %v", err)
		}
	})
}

func putCostOf(key string, size int) int64 { return 256 + 2*int64(len(key)+size) }

// TestQuota_SetQuotaBytes changes the quota of an open store: a store
// refused at its quota takes writes once the quota is raised, and is
// refused again once it is lowered below its size; an alarm outlasts
// any quota, and Options.OnAlarm hears of it once.
func TestQuota_SetQuotaBytes(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		var raised []sqlstore.Alarm // by ActivateAlarm, in this goroutine
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), QuotaBytes: testQuota, OnAlarm: func(a sqlstore.Alarm) { raised = append(raised, a) }})
		acked, err := fill(t, s, "fill", 32<<10, 1000)
		checkErr(t, "put past the quota", err, sqlstore.ErrNoSpace)

		s.SetQuotaBytes(4 * testQuota)
		if got := s.QuotaBytes(); got != 4*testQuota {
			t.Fatalf("QuotaBytes() after SetQuotaBytes = %d, want %d", got, 4*testQuota)
		}
		put(t, s, "after", "a larger quota")

		s.SetQuotaBytes(1)
		_, _, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("after"), Value: []byte("a quota below the size")})
		var qe *sqlstore.QuotaError
		if !errors.As(err, &qe) || qe.Quota != 1 {
			t.Fatalf("put over a lowered quota: %v, want a QuotaError against 1 byte", err)
		}
		s.SetQuotaBytes(0)
		if got := s.QuotaBytes(); got != sqlstore.DefaultQuotaBytes {
			t.Errorf("QuotaBytes() after SetQuotaBytes(0) = %d, want the default %d", got, sqlstore.DefaultQuotaBytes)
		}

		alarm := sqlstore.Alarm{MemberID: 1, Type: sqlstore.AlarmNoSpace}
		for range 2 {
			if err := s.ActivateAlarm(ctx, alarm); err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(raised) != fmt.Sprint([]sqlstore.Alarm{alarm}) {
			t.Errorf("OnAlarm got %v, want %v once", raised, alarm)
		}
		s.SetQuotaBytes(-1)
		_, _, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("after"), Value: []byte("no quota, an alarm")})
		checkErr(t, "put under an alarm with no quota", err, sqlstore.ErrNoSpace)
		if _, err := s.DeactivateAlarm(ctx, alarm); err != nil {
			t.Fatal(err)
		}
		put(t, s, "after", "disarmed")
		checkAcked(t, s, acked)
	})
}

// TestQuota_Alarm checks that a NOSPACE alarm refuses growing requests
// whatever the store's size, and that it is kept in the database: it
// survives a restart, and instances on one database share it.
func TestQuota_Alarm(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		// No quota: only the alarm refuses.
		s := openWith(t, sqlstore.Options{DSN: dsn, QuotaBytes: -1})
		other := open(t, dsn)
		put(t, s, "k", "v")
		alarm := sqlstore.Alarm{MemberID: 0xfeedfacecafebeef, Type: sqlstore.AlarmNoSpace}
		if err := s.ActivateAlarm(ctx, alarm); err != nil {
			t.Fatalf("ActivateAlarm: %v", err)
		}
		if err := s.ActivateAlarm(ctx, alarm); err != nil {
			t.Fatalf("ActivateAlarm again: %v", err)
		}
		checkAlarms(t, s, alarm)

		refused := func(t *testing.T, s *sqlstore.Store) {
			t.Helper()
			_, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("v2")})
			checkErr(t, "put", err, sqlstore.ErrNoSpace)
			var qe *sqlstore.QuotaError
			if errors.As(err, &qe) {
				t.Errorf("put refused by the alarm: %v, want ErrNoSpace, not a QuotaError", err)
			}
			_, err = s.Txn(ctx, txnPut("k", "v"))
			checkErr(t, "txn with a put", err, sqlstore.ErrNoSpace)
			_, err = s.LeaseGrant(ctx, 0, 60)
			checkErr(t, "lease grant", err, sqlstore.ErrNoSpace)
		}
		refused(t, s)
		checkKV(t, "k after refused writes", get(t, s, "k"), ptr(kv("k", "v", 2, 2, 1, 0)))
		// Reads, read-only txns and deletes still work.
		if res, err := s.Txn(ctx, &sqlstore.TxnRequest{Success: []sqlstore.Op{{Range: &sqlstore.RangeRequest{Key: []byte("k")}}}}); err != nil || len(res.Results[0].Range.KVs) != 1 {
			t.Errorf("read-only txn: %+v, %v", res, err)
		}
		del(t, s, "k", "")

		t.Run("other instance", func(t *testing.T) {
			// Another instance learns of the alarm from the database
			// once it measures in the background; its reads see it at
			// once.
			checkAlarms(t, other, alarm)
			refused(t, other)
		})

		t.Run("restart", func(t *testing.T) {
			again := openWith(t, sqlstore.Options{DSN: dsn})
			checkAlarms(t, again, alarm)
			refused(t, again)
		})

		was, err := other.DeactivateAlarm(ctx, alarm)
		if err != nil || !was {
			t.Fatalf("DeactivateAlarm through the other instance: %v, %v; want true", was, err)
		}
		was, err = other.DeactivateAlarm(ctx, alarm)
		if err != nil || was {
			t.Fatalf("DeactivateAlarm again: %v, %v; want false", was, err)
		}
		checkAlarms(t, other)
		put(t, other, "k", "through the other")
		// The first instance reads the alarms again at most a second
		// after a refused write.
		eventually(t, "the first instance to take writes again", func() (bool, error) {
			_, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("through the first")})
			return err == nil, err
		})
		checkAlarms(t, s)
	})
}

func checkAlarms(t *testing.T, s *sqlstore.Store, want ...sqlstore.Alarm) {
	t.Helper()
	got, err := s.Alarms(context.Background())
	if err != nil {
		t.Fatalf("Alarms: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Alarms() = %v, want %v", got, want)
	}
}

// TestQuota_Size checks what Size counts: SQLite's files with the WAL,
// and on PostgreSQL and MySQL the store's own tables only.
func TestQuota_Size(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s := open(t, dsn)
		val := make([]byte, 256<<10)
		for i := range 8 {
			_, _ = rand.Read(val)
			put(t, s, fmt.Sprint("k", i), string(val))
		}
		size, err := s.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inUse, err := s.SizeInUse(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Each value is in kv_current and kv_log.
		if size < 2*8*256<<10 || inUse <= 0 || inUse > size {
			t.Errorf("Size() = %d, SizeInUse() = %d after 4 MiB of values", size, inUse)
		}
		switch b.Name {
		case sqltest.SQLite:
			path := strings.TrimPrefix(dsn, "sqlite://")
			var files int64
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				if st, err := os.Stat(p); err == nil {
					files += st.Size()
				}
			}
			if wal, err := os.Stat(path + "-wal"); err != nil || wal.Size() == 0 {
				t.Errorf("no WAL to count: %v", err)
			}
			if size != files {
				t.Errorf("Size() = %d, want the database's files: %d", size, files)
			}
		default:
			// A table beside the store's is not the store's.
			db := rawDB(t, dsn)
			create, insert := `CREATE TABLE not_the_store (v LONGBLOB)`, `INSERT INTO not_the_store (v) VALUES (?)`
			if b.Name == sqltest.Postgres {
				create, insert = `CREATE TABLE not_the_store (v BYTEA)`, `INSERT INTO not_the_store (v) VALUES ($1)`
			}
			if _, err := db.Exec(create); err != nil {
				t.Fatal(err)
			}
			for range 8 {
				_, _ = rand.Read(val)
				if _, err := db.Exec(insert, val); err != nil {
					t.Fatal(err)
				}
			}
			after, err := s.Size(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after != size {
				t.Errorf("Size() = %d after 2 MiB in another table, %d before", after, size)
			}
		}
	})
}

// TestQuota_PostgresSchemas runs two stores in one PostgreSQL database,
// each in its own schema (search_path): each counts only its own tables.
func TestQuota_PostgresSchemas(t *testing.T) {
	for _, b := range sqltest.Backends() {
		if b.Name != sqltest.Postgres {
			continue
		}
		ctx := context.Background()
		dsn := b.NewDSN(t)
		// Open creates the database.
		if _, err := sqlstore.Migrate(ctx, dsn); err != nil {
			t.Fatal(err)
		}
		db := rawDB(t, dsn)
		stores := map[string]*sqlstore.Store{}
		for _, schema := range []string{"tenant_a", "tenant_b"} {
			if _, err := db.Exec(`CREATE SCHEMA ` + schema); err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			stores[schema] = open(t, u.String())
		}
		a, bs := stores["tenant_a"], stores["tenant_b"]
		beforeB, err := bs.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		val := make([]byte, 256<<10)
		for i := range 8 {
			_, _ = rand.Read(val)
			put(t, a, fmt.Sprint("k", i), string(val))
		}
		sizeA, err := a.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		afterB, err := bs.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sizeA < 2*8*256<<10 || afterB != beforeB {
			t.Errorf("after 2 MiB written to tenant_a: its size %d; tenant_b's %d, before %d", sizeA, afterB, beforeB)
		}
		if get(t, bs, "k0") != nil {
			t.Errorf("tenant_b sees tenant_a's key")
		}
	}
}
