package sqlstore

import (
	"sync"
	"time"
)

// notifyTimes times the NOTIFY of this server's own commits on
// PostgreSQL: when it commits a revision, from just before COMMIT (the
// notification is sent at commit and may arrive before COMMIT returns),
// until the notification comes back on its LISTEN connection
// (sqlkube_store_notify_lag_seconds). Other servers' commits are not
// timed: their commit times are not known here. At most maxPendingNotifies
// revisions wait; a notification that never comes (its LISTEN connection
// was down) is forgotten when the map is full.
type notifyTimes struct {
	mu      sync.Mutex
	pending map[int64]time.Time
}

const maxPendingNotifies = 1024

// committing records that rev is about to be committed, with its NOTIFY.
func (n *notifyTimes) committing(rev int64, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending == nil || len(n.pending) >= maxPendingNotifies {
		n.pending = map[int64]time.Time{}
	}
	n.pending[rev] = at
}

// failed forgets rev, whose commit failed.
func (n *notifyTimes) failed(rev int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.pending, rev)
}

// arrived returns how long rev's notification took, if this server
// committed it.
func (n *notifyTimes) arrived(rev int64, now time.Time) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	at, ok := n.pending[rev]
	if !ok {
		return 0, false
	}
	delete(n.pending, rev)
	return now.Sub(at), true
}

// notifyArrived observes the lag of rev's notification, if this server
// committed it.
func (s *Store) notifyArrived(rev int64) {
	if d, ok := s.notifies.arrived(rev, time.Now()); ok {
		s.metrics.notifyLag.Observe(d.Seconds())
	}
}
