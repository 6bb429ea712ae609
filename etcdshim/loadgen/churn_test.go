package loadgen_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/loadgen"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// TestChurn runs the churn workload briefly against sqlkube's etcd API and
// checks that every kind of operation ran without an error and that each
// interval was reported with the endpoint's revision and size.
func TestChurn(t *testing.T) {
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: "sqlite://" + filepath.Join(t.TempDir(), "state.db"), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdshim.New(etcdshim.Options{Backend: store, Logger: zerolog.Nop()})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop(5 * time.Second)

	var got []loadgen.ChurnInterval
	err = loadgen.Churn(ctx, loadgen.ChurnConfig{
		Endpoints: []string{l.Addr().String()}, Concurrency: 8, Keys: 64, ValueSize: 100,
		Duration: 1500 * time.Millisecond, Interval: 500 * time.Millisecond,
	}, func(r loadgen.ChurnInterval) { got = append(got, r) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("%d intervals reported, want at least 2: %v", len(got), got)
	}
	var creates, updates, deletes int
	var lastRev int64
	for _, r := range got {
		if r.Errors != 0 {
			t.Errorf("interval %v: %d errors", r.End, r.Errors)
		}
		// An interval may see no commit (a slow fsync on a loaded
		// machine can hold the writers for half a second), but the
		// revision never goes back.
		if r.Revision < lastRev || r.Revision <= 0 || r.DBSize <= 0 {
			t.Errorf("interval %v: revision %d (previous %d), db size %d", r.End, r.Revision, lastRev, r.DBSize)
		}
		lastRev = r.Revision
		creates, updates, deletes = creates+r.Creates, updates+r.Updates, deletes+r.Deletes
	}
	if creates == 0 || updates == 0 || deletes == 0 {
		t.Errorf("creates %d, updates %d, deletes %d: want each > 0", creates, updates, deletes)
	}
	// Churn deletes its keys at the end.
	res, err := store.Range(ctx, sqlstore.RangeRequest{Key: []byte("/registry/churn/"), End: []byte("/registry/churn0"), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 0 {
		t.Errorf("%d keys left after the run", res.Count)
	}
}
