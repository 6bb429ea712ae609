package sqlstore_test

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// BenchmarkPut_50Clients measures Puts of new keys with 256-byte values
// from 50 concurrent callers on SQLite, in process (no gRPC): the store's
// side of etcd's `benchmark put --clients 50 --sequential-keys`, so that
// the cost of the store and that of the gRPC path can be told apart. The
// keys are made as etcd's tool makes them, the counter as a varint in an
// 8-byte key, whose byte order scatters consecutive keys over the whole
// key space: each put of a group commit lands on a different page of
// every B-tree it touches. (Big-endian counters would append to the right
// edge of each tree, a much cheaper load than the tool's.)
func BenchmarkPut_50Clients(b *testing.B) {
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, sqlstore.Options{DSN: "sqlite://" + filepath.Join(b.TempDir(), "state.db"), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := make([]byte, 256)
	var n atomic.Int64
	b.SetParallelism(25) // 50 callers at GOMAXPROCS 2
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := make([]byte, 8) // the tool's default --key-size
		for pb.Next() {
			binary.PutVarint(key, n.Add(1))
			if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: key, Value: val}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
