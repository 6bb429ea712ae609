package sqlstore

import "testing"

// TestLeaseClock_GrantDuringRead: an expiry this instance wrote while the
// timer read the database (which may not have seen it) is kept, whatever
// the read found.
func TestLeaseClock_GrantDuringRead(t *testing.T) {
	for _, c := range []struct {
		name            string
		before, during  int64
		read, wantAfter int64
	}{
		{"no lease before, one granted during the read", 0, 100, 0, 100},
		{"an earlier lease granted during the read", 0, 100, 200, 100},
		{"the read found an earlier one", 0, 300, 200, 200},
		{"a grant before the read is the read's to find", 50, 0, 200, 200},
		{"nothing anywhere", 0, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			lc := newLeaseClock()
			if c.before != 0 {
				lc.saw(c.before)
			}
			lc.beginRead()
			if c.during != 0 {
				lc.saw(c.during)
			}
			lc.set(c.read)
			if got := lc.get(); got != c.wantAfter {
				t.Errorf("next = %d, want %d", got, c.wantAfter)
			}
		})
	}
}
