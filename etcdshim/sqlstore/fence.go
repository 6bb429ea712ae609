package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// A database can lose commits that a store has seen: a failover to a
// standby that had not received them (asynchronous replication, or a
// commit that became visible on a dying primary before its standby had
// it), or a restore of an older backup. The database then hands those
// revisions out again, for other writes. A store that went on as before
// would hand its watchers a silent gap (its hub holds the lost revisions
// and skips the new ones with the same numbers) and keep serving objects
// that no longer exist, and its clients would resume from
// resourceVersions that now name something else.
//
// So when a store finds that the database has lost revisions it has
// seen, it fences them off: one write transaction moves the revision up
// past every revision the store has seen (by fenceMargin), so none is
// handed out twice, and compacts everything below; the hub drops its window and ends every
// watch with ErrCompacted, and the other stores on the database end
// theirs when they read the compaction. Clients get 410 Gone and relist.
// What was lost stays lost (that is the database's loss), but no client
// goes on from a history that is not the database's.
//
// The store finds a loss when:
//   - the writer, holding the revision lock, reads a revision below the
//     highest it has seen (see applyBatch);
//   - the log follower reads a current revision below its hub's head
//     (see catchUp);
//   - after its LISTEN connection came back (PostgreSQL: a restart or a
//     failover), the log's events differ from the hub's for the
//     revisions from where the hub stood when the connection was lost
//     (see verifyAfterReconnect): the database may have handed the lost
//     revisions out again already.

// fenceTarget is where a batch that read revision rev and compacted
// revision compacted under the revision lock must fence to, or 0 when the
// database has lost nothing this store has seen and no check asked for a
// fence. When a check asked for one and another store has fenced past
// everything this one has seen already, it only ends this store's
// watches.
func (s *Store) fenceTarget(rev, compacted int64) int64 {
	head, _ := s.hub.state()
	known := max(head, s.seenRev.Load())
	wanted := s.fenceWanted.Load()
	switch {
	case rev < known:
		if !wanted { // else the check that asked for it said so
			s.log.Error().Int64("revision", rev).Int64("seen", known).Msg("the database's revision is below one this server has seen: commits it saw were lost " +
				"(a failover to a standby that lacked them, or a restore of an older backup); fencing them off: watches end with 410 Gone and clients relist")
		}
	case !wanted:
		return 0
	case compacted >= known:
		s.fenceWanted.Store(false)
		s.verifyFrom.Store(0)
		s.hub.diverge(rev)
		s.log.Warn().Int64("revision", rev).Msg("the database was fenced past every revision this server has seen, by another server: every watch here ended (410 Gone)")
		return 0
	}
	return max(rev, known) + fenceMargin
}

// fenceMargin is how far past the highest revision it has seen a store
// fences. Other stores may have seen more of the lost history than this
// one (they followed the old primary a little further); a fence past it
// all is the only one, and no client of any of them can resume from a
// revision the fence leaves readable. The margin is what an old primary
// may have committed beyond what this store saw; a larger loss is fenced
// again by the stores that saw more, when they find it. It also makes
// the fence a revision of its own, which tells the other stores.
const fenceMargin = 1 << 20

// fenced is called after a batch that fenced to target committed.
func (s *Store) fenced(target int64) {
	s.fenceWanted.Store(false)
	// Every watch ends: nothing seen before is left to check.
	s.verifyFrom.Store(0)
	s.hub.diverge(target)
	s.metrics.fences.Inc()
	s.log.Warn().Int64("revision", target).Msg("fenced off lost revisions: revision and compacted revision moved here, every watch ended")
}

// requestFence makes the writer fence at its next batch, and runs an
// empty write so that there is one.
func (s *Store) requestFence() {
	s.fenceWanted.Store(true)
	if !s.fenceRunning.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.fenceRunning.Store(false)
		_, _, err := s.write(s.stopCtx, func(a *applier) (any, error) { return nil, nil })
		if err != nil && s.stopCtx.Err() == nil {
			s.log.Warn().Err(err).Msg("fencing off lost revisions failed; the next write retries")
		}
	}()
}

// verifyAfterReconnect compares the hub's events of revisions from
// s.verifyFrom on (where the hub stood when the LISTEN connection was
// lost; at most logChunk of them) with the log's, once, and asks for a
// fence if they differ. Revisions below verifyFrom need no check: the log
// is written in revision order, so a database that still has revision
// verifyFrom as the hub has it has every revision below it too.
func (s *Store) verifyAfterReconnect(ctx context.Context) error {
	from := s.verifyFrom.Load()
	if from == 0 {
		return nil
	}
	head, _ := s.hub.state()
	to := min(head, from+logChunk-1)
	have, ok := s.hub.read(from, to, keyRange{start: []byte{}, noEnd: true})
	if !ok {
		// The window moved on past it: nothing left to compare.
		s.log.Warn().Int64("from", from).Msg("could not check the revisions seen before the database connection was lost: no longer in the watch window")
		s.verifyFrom.CompareAndSwap(from, 0)
		return nil
	}
	// Revisions records the compacted revision too, which new watches
	// are checked against.
	cur, _, err := s.Revisions(ctx)
	if err != nil {
		return err
	}
	var diff string
	if cur < to {
		diff = fmt.Sprintf("the database is at revision %d, below %d", cur, to)
	} else {
		log, err := s.readLog(ctx, from, to, keyRange{start: []byte{}, noEnd: true})
		switch {
		case errors.Is(err, ErrCompacted):
			// Compacted since, by another server's fence most likely:
			// the database has moved past what this server served,
			// which cannot be checked any more. No fence of its own is
			// needed, but its watches must end.
			s.verifyFrom.CompareAndSwap(from, 0)
			s.hub.diverge(cur)
			s.log.Warn().Int64("from", from).Int64("revision", cur).Msg("the revisions this server saw before the database connection was lost were compacted since, " +
				"so they cannot be checked: every watch ended (410 Gone), as after a fence")
			return nil
		case err != nil:
			return err
		default:
			diff = eventsDiffer(have, log)
		}
	}
	s.verifyFrom.CompareAndSwap(from, 0)
	if diff != "" {
		s.log.Error().Int64("from", from).Int64("to", to).Str("difference", diff).Msg("after the database connection came back, the log's revisions differ from those this server saw: " +
			"commits it saw were lost (a failover to a standby that lacked them, or a restore of an older backup); fencing them off: watches end with 410 Gone and clients relist")
		s.requestFence()
	}
	return nil
}

// eventsDiffer says how two lists of events (of the same revisions)
// differ, or "" when they hold the same changes.
func eventsDiffer(seen, log []Event) string {
	str := func(evs []Event) []string {
		out := make([]string, len(evs))
		for i, e := range evs {
			out[i] = fmt.Sprintf("%020d %d %q %x", e.KV.ModRevision, e.Type, e.KV.Key, e.KV.Value)
		}
		slices.Sort(out)
		return out
	}
	a, b := str(seen), str(log)
	if slices.Equal(a, b) {
		return ""
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	first := func(s []string) string {
		if i >= len(s) {
			return "nothing"
		}
		return s[i][:min(len(s[i]), 120)]
	}
	return fmt.Sprintf("%d events seen, %d in the log; first difference: seen %s, log %s", len(a), len(b), first(a), first(b))
}
