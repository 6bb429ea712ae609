package etcdshim_test

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestKV_RangeStream: etcd 3.7's streaming range, over gRPC and in
// process, merges to what Range answers: several chunks for a large range,
// all at the revision the stream started at (a write while it is read
// does not show), limits and More/Count on the last chunk, count-only, a
// past revision; custom sort orders and revision filters are refused as
// etcd refuses them.
func TestKV_RangeStream(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		local := ts.srv.LocalClient()
		t.Cleanup(func() { _ = local.Close() })
		ctx := testCtx(t)
		// 2,000 keys of 2 KiB: 4 MB, several chunks of MaxRequestBytes.
		const n = 2000
		value := strings.Repeat("v", 2<<10)
		var ops []clientv3.Op
		for i := 0; i < n; i++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("s/%04d", i), value))
			if len(ops) == 100 {
				if _, err := ts.client.Txn(ctx).Then(ops...).Commit(); err != nil {
					t.Fatal(err)
				}
				ops = nil
			}
		}
		mustPut(t, ts.client, "t/other", "x")
		atFill := ts.rev(n / 100) // in transactions of 100
		for name, c := range map[string]*clientv3.Client{"grpc": ts.client, "local": local} {
			t.Run(name, func(t *testing.T) {
				want, err := c.Get(ctx, "s/", clientv3.WithPrefix())
				if err != nil {
					t.Fatal(err)
				}
				stream, err := c.GetStream(ctx, "s/", clientv3.WithPrefix())
				if err != nil {
					t.Fatal(err)
				}
				first := <-stream
				if err := first.Err(); err != nil {
					t.Fatal(err)
				}
				chunks := 1
				if first.RangeResponse.Header != nil {
					t.Errorf("the first of several chunks has a header")
				}
				// A write while the stream is read: not in it.
				mustPut(t, c, "s/99", "late")
				keys := len(first.RangeResponse.Kvs)
				var last *pb.RangeResponse
				for r := range stream {
					if err := r.Err(); err != nil {
						t.Fatal(err)
					}
					chunks++
					keys += len(r.RangeResponse.Kvs)
					last = r.RangeResponse
				}
				if chunks < 3 || last == nil || last.Header == nil {
					t.Fatalf("%d chunks, last %v; want 3 or more, the last with the header", chunks, last)
				}
				if keys != n || last.Count != n || last.More || last.Header.Revision != want.Header.Revision {
					t.Errorf("streamed %d keys, count %d, more %v, revision %d; want %d, %d, false, %d",
						keys, last.Count, last.More, last.Header.Revision, n, n, want.Header.Revision)
				}
				mustDelete(t, c, "s/99")

				// Merged, with a limit: More and Count as Range gives them.
				lim, err := c.GetStream(ctx, "s/", clientv3.WithPrefix(), clientv3.WithLimit(5))
				if err != nil {
					t.Fatal(err)
				}
				got, err := clientv3.GetStreamToGetResponse(lim)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Kvs) != 5 || !got.More || got.Count != n || string(got.Kvs[4].Key) != "s/0004" {
					t.Errorf("limit 5: %d keys, more %v, count %d; want 5, true, %d", len(got.Kvs), got.More, got.Count, n)
				}
				// At a past revision: the keys as they were.
				past, err := c.GetStream(ctx, "s/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(2)), clientv3.WithKeysOnly())
				if err != nil {
					t.Fatal(err)
				}
				if got, err = clientv3.GetStreamToGetResponse(past); err != nil || len(got.Kvs) != 200 || got.Count != 200 {
					t.Errorf("at revision %d: %d keys, %v; want the 200 written by then", ts.rev(2), len(got.Kvs), err)
				}
				// Count only: one response, no keys.
				count, err := c.GetStream(ctx, "s/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					t.Fatal(err)
				}
				if got, err = clientv3.GetStreamToGetResponse(count); err != nil || len(got.Kvs) != 0 || got.Count != n || got.Header.Revision < atFill {
					t.Errorf("count only: %v, %v; want count %d", got, err, n)
				}
				for what, opts := range map[string][]clientv3.OpOption{
					"sorted by value": {clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend)},
					"descending":      {clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)},
					"mod revision":    {clientv3.WithPrefix(), clientv3.WithMinModRev(2)},
				} {
					s, err := c.GetStream(ctx, "s/", opts...)
					if err == nil {
						_, err = clientv3.GetStreamToGetResponse(s)
					}
					if status.Code(err) != codes.Unimplemented {
						t.Errorf("%s: %v, want Unimplemented", what, err)
					}
				}
			})
		}
	})
}
