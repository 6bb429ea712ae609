package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// BenchmarkRange_List500 measures a 500-key prefix read with limit, as a
// paginated Kubernetes list issues, on SQLite.
func BenchmarkRange_List500(b *testing.B) {
	ctx := context.Background()
	s := seedPods(b, ctx)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("/registry/pods/"), End: []byte("/registry/pods0"), Limit: 500})
			if err != nil || len(res.KVs) != 500 || res.Count != 2000 {
				b.Fatalf("range: %v %d %d", err, len(res.KVs), res.Count)
			}
		}
	})
}

// BenchmarkRange_GetOne measures a linearizable single-key read on SQLite.
func BenchmarkRange_GetOne(b *testing.B) {
	ctx := context.Background()
	s := seedPods(b, ctx)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			res, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte(fmt.Sprintf("/registry/pods/%06d", i%2000))})
			if err != nil || len(res.KVs) != 1 {
				b.Fatalf("range: %v", err)
			}
		}
	})
}

// seedPods opens a SQLite store holding 2,000 keys of 1 KiB under
// /registry/pods/, closed when the benchmark ends.
func seedPods(b *testing.B, ctx context.Context) *sqlstore.Store {
	b.Helper()
	s, err := sqlstore.Open(ctx, sqlstore.Options{DSN: "sqlite://" + filepath.Join(b.TempDir(), "state.db"), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	val := make([]byte, 1024)
	for i := 0; i < 2000; i++ {
		if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(fmt.Sprintf("/registry/pods/%06d", i)), Value: val}); err != nil {
			b.Fatal(err)
		}
	}
	return s
}
