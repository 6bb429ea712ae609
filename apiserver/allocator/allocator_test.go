package allocator

import (
	"context"
	"testing"

	"github.com/sqlkube/sqlkube/internal/teststore"
)

// TestReservations_StaticBand: random cluster IPs come from above the
// first 16 addresses of a /24 until the rest is taken, so an address
// asked for by number there (kube-dns's 10.0.0.10) stays free.
func TestReservations_StaticBand(t *testing.T) {
	ctx := context.Background()
	client := teststore.Local(t, t.TempDir())

	r, err := NewClusterIPs(client.Client, "10.0.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.staticBand(); got != 16 {
		t.Fatalf("static band of a /24: %d, want 16", got)
	}
	inBand := func(v string) bool { i, _ := r.index(v); return i < 16 }
	for n := range 254 - 16 {
		v, err := r.Allocate(ctx, "", "test/svc")
		if err != nil {
			t.Fatalf("allocation %d: %v", n, err)
		}
		if inBand(v) {
			t.Fatalf("allocation %d: %s from the static band while addresses above it are free", n, v)
		}
	}
	if v, err := r.Allocate(ctx, "10.0.0.10", "kube-system/kube-dns"); err != nil || v != "10.0.0.10" {
		t.Fatalf("asked for 10.0.0.10: %q, %v", v, err)
	}
	// The rest is taken: the band's free addresses (not the kubernetes
	// service's first) go next.
	v, err := r.Allocate(ctx, "", "test/svc")
	if err != nil || !inBand(v) || v == "10.0.0.1" || v == "10.0.0.10" {
		t.Fatalf("after the rest is taken: %q, %v", v, err)
	}
	for _, c := range []struct{ size, want int64 }{{10, 0}, {16, 0}, {17, 16}, {1000, 62}, {1 << 20, 256}} {
		if got := (&Reservations{size: c.size}).staticBand(); got != c.want {
			t.Errorf("static band of %d values: %d, want %d", c.size, got, c.want)
		}
	}
}
