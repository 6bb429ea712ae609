package etcdshim_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/internal/testfs"
)

// TestDiskFull_EtcdAPI: over gRPC, a put refused for a full disk under
// SQLite is ErrGRPCDiskFull (ResourceExhausted, not etcd's NOSPACE), and
// no NOSPACE alarm is raised; Status lists the state among its errors;
// deletes and compaction succeed; once space is freed puts succeed again
// and Status is clean.
func TestDiskFull_EtcdAPI(t *testing.T) {
	const reserve = 20 << 20
	dir := testfs.Tmpfs(t, 64<<20)
	ts := startStoreServer(t, sqlstore.Options{DSN: "sqlite://" + filepath.Join(dir, "state.db"), ReserveBytes: reserve})
	ctx := testCtx(t)
	filler := filepath.Join(dir, "filler")
	testfs.Fill(t, filler, 8<<20)
	val := strings.Repeat("x", 128<<10)
	var err error
	n := 0
	for ; n < 200; n++ {
		if _, err = ts.client.Put(ctx, fmt.Sprintf("k/%03d", n), val); err != nil {
			break
		}
	}
	if !errors.Is(err, etcdshim.ErrGRPCDiskFull) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after %d puts of 128 KiB on a full disk: %v, want ErrGRPCDiskFull", n, err)
	}
	st, err := ts.client.Status(ctx, ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Errors) != 1 || !strings.HasPrefix(st.Errors[0], "sqlkube: disk full since ") {
		t.Errorf("Status errors while the disk is full: %q, want the disk-full line alone (no NOSPACE alarm)", st.Errors)
	}
	if resp, err := ts.client.Delete(ctx, "k/", clientv3.WithPrefix()); err != nil || resp.Deleted == 0 {
		t.Fatalf("delete while the disk is full: %v, %v", resp, err)
	}
	if _, err := ts.client.Compact(ctx, st.Header.Revision); err != nil {
		t.Fatalf("compact while the disk is full: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		if _, err = ts.client.Put(ctx, "after", "x"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("put once space was freed: %v", err)
	}
	if st, err := ts.client.Status(ctx, ts.addr); err != nil || len(st.Errors) != 0 {
		t.Errorf("Status after: %v, %v; want no errors", st, err)
	}
}
