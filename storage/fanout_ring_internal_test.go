package storage

import "testing"

// TestFanout_RingGrows: a ring that doubles keeps every event at its
// sequence number's place, also when the events had wrapped around.
func TestFanout_RingGrows(t *testing.T) {
	f := &Fanout{o: FanoutOptions{Buffer: 16}, ring: make([]*ringEntry, 4)}
	// Events 6..9 in a ring of 4: they wrapped (6 at 2, 7 at 3, 8 at 0, 9 at 1).
	f.first, f.next = 6, 10
	for seq := f.first; seq < f.next; seq++ {
		f.ring[seq%4] = &ringEntry{rv: seq}
	}
	for _, want := range []int{8, 16, 16} {
		f.growLocked()
		if len(f.ring) != want {
			t.Fatalf("ring of %d after growing, want %d (Buffer 16)", len(f.ring), want)
		}
		for seq := f.first; seq < f.next; seq++ {
			if e := f.ring[seq%uint64(len(f.ring))]; e == nil || e.rv != seq {
				t.Fatalf("ring of %d: event %d at its place is %v", len(f.ring), seq, e)
			}
		}
	}
}
