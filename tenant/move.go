package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/sqlkube/sqlkube/datastore"
)

// A move takes a tenant from the datastore its data is in
// (Status.Datastore) to the one its spec names, in steps that leave it
// whole in one place at every moment:
//
//  1. the target is recorded among the copies to drop (DropPending), the
//     phase is Moving;
//  2. the tenant stops (its port closes; nothing starts it meanwhile);
//  3. its data is copied with `sqlkube datastore`'s code (every key,
//     lease and log row, the revision and compaction), read back and
//     checked;
//  4. the switch, one status write: Datastore is the target, the old
//     place is among the copies to drop;
//  5. the tenant starts on the target; the old copy is dropped.
//
// A failure before 4 leaves the data where it was, untouched (it was
// only read): the tenant starts there again, the target's partial copy
// is dropped, condition Placed says why (MoveFailed), and the host tries
// again later. A host stopped anywhere finds, when it starts again, the
// tenant in the place its status names and the other copy to drop.

// moveFailure is a move that failed: tried again at retryAt, or at once
// when the spec changes.
type moveFailure struct {
	to         string
	generation int64
	n          int
	retryAt    time.Time
}

// moveRetry is how long after a failed move it is tried again, doubled
// at each failure up to maxMoveRetry.
const (
	moveRetry    = 15 * time.Second
	maxMoveRetry = 10 * time.Minute
)

// dropTimeout bounds dropping one copy.
const dropTimeout = 30 * time.Second

// reconcileData moves t when its spec names another datastore than the
// one its data is in, and drops (in the background) the copies its
// status lists as pending. done says it handled t (the caller returns
// requeue and err); otherwise t runs where its data is.
func (h *Host) reconcileData(ctx context.Context, t *Tenant, sl *slot) (requeue time.Duration, done bool, err error) {
	h.mu.Lock()
	if sl.datastore == "" {
		sl.datastore = t.Status.Datastore
	}
	failed, checked := sl.moveFailed, sl.checked
	h.mu.Unlock()
	if !checked && t.Status.KubeconfigSecret != "" {
		// It has served: its data must be where its status says. Never a
		// new empty cluster in its place (a datastore's DSN that now
		// names another database, a SQLite file removed).
		ds := h.datastore(t.Status.Datastore)
		ok, err := h.hasData(ctx, ds, t.Name)
		if err != nil {
			return 0, true, fmt.Errorf("look for tenant %s's data in datastore %s: %w", t.Name, ds.Name, err)
		}
		if !ok {
			return 0, true, h.setStatus(ctx, t, func(s *Status) {
				s.Phase, s.Message = PhaseFailed, fmt.Sprintf("its data is not in datastore %s (no %s there): the host makes no new empty cluster in its place; restore it from a backup into a new tenant, or give the host the datastore that holds it", ds.Name, h.placeName(ds, t.Name))
			})
		}
	}
	h.mu.Lock()
	sl.checked = true
	h.mu.Unlock()
	want := t.Spec.Datastore
	if want == "" || want == t.Status.Datastore {
		h.mu.Lock()
		sl.moveFailed = nil
		h.mu.Unlock()
		if len(t.Status.DropPending) > 0 {
			h.dropInBackground(ctx, t.Name, sl)
		}
		if c := meta.FindStatusCondition(t.Status.Conditions, ConditionPlaced); c != nil && c.Status != metav1.ConditionTrue {
			return 0, true, h.setStatus(ctx, t, func(s *Status) {
				setCondition(s, ConditionPlaced, true, "Placed", "its data is in datastore "+s.Datastore)
			})
		}
		return 0, false, nil
	}
	to := h.datastore(want)
	if to == nil {
		// Nothing to move to: it runs where it is, and says so.
		err := h.setStatus(ctx, t, func(s *Status) {
			setCondition(s, ConditionPlaced, false, "UnknownDatastore", fmt.Sprintf(
				"spec.datastore names %q, which this host was not given (it has %s): the tenant stays in %s", want, h.datastoreNames(), s.Datastore))
		})
		return 0, err != nil, err
	}
	if failed != nil && failed.to == want && failed.generation == t.Generation && time.Now().Before(failed.retryAt) {
		h.queue.AddAfter(t.Name, time.Until(failed.retryAt))
		return 0, false, nil
	}
	return 0, true, h.move(ctx, t, sl, to)
}

// dropInBackground drops tenant name's pending copies (dropPending)
// unless that runs already; a failure is tried again later. The tenant
// runs meanwhile: an old copy's database being down does not keep it
// from starting.
func (h *Host) dropInBackground(ctx context.Context, name string, sl *slot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.dropping {
		return
	}
	sl.dropping = true
	h.bg.Go(func() {
		defer func() {
			h.mu.Lock()
			sl.dropping = false
			h.mu.Unlock()
		}()
		unlock := h.lockTenant(name)
		err := h.dropPending(ctx, name)
		unlock()
		if err != nil && ctx.Err() == nil {
			h.cfg.Log.Warn().Err(err).Str("tenant", name).Msg("an old copy of the tenant's data is not dropped yet; trying again later")
			h.queue.AddAfter(name, dropTimeout)
		}
	})
}

// move moves tenant t to datastore to (see the steps above).
func (h *Host) move(ctx context.Context, t *Tenant, sl *slot, to *Datastore) error {
	unlock := h.lockTenant(t.Name)
	defer unlock()
	// The cache may trail the host's own last write (a move just made):
	// the API decides.
	fresh, err := h.getFresh(ctx, t.Name)
	if err != nil {
		return err
	}
	if fresh == nil || fresh.DeletionTimestamp != nil || fresh.Spec.Datastore != to.Name || fresh.Status.Datastore != t.Status.Datastore {
		return nil // the newer version is queued
	}
	from := h.datastore(fresh.Status.Datastore)
	log := h.cfg.Log.With().Str("tenant", t.Name).Str("from", from.Name).Str("to", to.Name).Logger()
	log.Info().Msg("moving the tenant")
	start := time.Now()

	// 1. The record first: from here on, a host stopped anywhere finds the
	// target among the copies to drop and the tenant whole where it was.
	if _, err := h.writeStatus(ctx, t.Name, func(t *Tenant) {
		s := &t.Status
		s.Phase, s.Message = PhaseMoving, "moving to datastore "+to.Name
		setCondition(s, ConditionPlaced, false, "Moving", fmt.Sprintf("moving from datastore %s to %s", from.Name, to.Name))
		s.DropPending = with(s.DropPending, to.Name)
	}); err != nil {
		return err
	}

	// 2. Stop it and keep it stopped: its port is closed until it runs
	// again (clients retry; a suspended tenant is not woken meanwhile).
	h.mu.Lock()
	sl.moving = true
	in, wake := sl.in, sl.wake
	sl.in, sl.wake = nil, nil
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		sl.moving = false
		h.mu.Unlock()
		h.queue.Add(t.Name) // start it, wherever its data is now
	}()
	if in != nil {
		_ = in.stop()
	}
	if wake != nil {
		wake.Close()
	}

	// 3. The copy, once no host can write the old copy any more: another
	// host serving the tenant beside this one (HA) may not have stopped
	// yet, and PostgreSQL refuses its writes from here on (Fence; a
	// failed move gives them back through Provision, at the next start).
	if from.Shared != nil {
		if err := from.Shared.Fence(ctx, sqlTenant(t.Name)); err != nil {
			return h.moveFailed(ctx, fresh, sl, from, to, fmt.Errorf("fence: %w", err))
		}
	}
	res, err := h.copyTenant(ctx, t.Name, from, to)
	if err != nil {
		return h.moveFailed(ctx, fresh, sl, from, to, err)
	}

	// 4. The switch.
	_, err = h.writeStatus(ctx, t.Name, func(t *Tenant) {
		s := &t.Status
		s.Datastore = to.Name
		s.DropPending = with(without(s.DropPending, to.Name), from.Name)
		s.Phase, s.Message = PhasePending, "starting in datastore "+to.Name
		setCondition(s, ConditionPlaced, true, "Moved", fmt.Sprintf("moved from datastore %s at revision %d (%d keys, checksum %s)",
			from.Name, res.Source.Revision, res.Keys, res.Checksum[:16]))
	})
	if err != nil {
		// Made or not? The API says (a write whose answer was lost).
		if moved, _ := h.getFresh(ctx, t.Name); moved == nil || moved.Status.Datastore != to.Name {
			return h.moveFailed(ctx, fresh, sl, from, to, fmt.Errorf("switch: %w", err))
		}
	}
	h.mu.Lock()
	sl.datastore, sl.moveFailed = to.Name, nil
	h.mu.Unlock()
	log.Info().Int64("revision", res.Source.Revision).Int64("keys", res.Keys).Dur("took", time.Since(start)).Msg("tenant moved")

	// 5. It starts on the target (the deferred enqueue), and the old
	// copy goes (reconcileData).
	return nil
}

// copyTenant copies tenant name's data from one datastore to another,
// replacing whatever the target held, and checks the copy.
func (h *Host) copyTenant(ctx context.Context, name string, from, to *Datastore) (*datastore.Result, error) {
	if from.Shared != nil && to.Shared != nil {
		a, err := from.Shared.DatabaseID(ctx)
		if err != nil {
			return nil, err
		}
		b, err := to.Shared.DatabaseID(ctx)
		if err != nil {
			return nil, err
		}
		if a == b {
			return nil, fmt.Errorf("datastores %s and %s are the same database", from.Name, to.Name)
		}
	}
	src, err := h.openSource(ctx, from, name)
	if err != nil {
		return nil, fmt.Errorf("read datastore %s: %w", from.Name, err)
	}
	defer src.Close()
	res, err := h.copyInto(ctx, src, to, name)
	if err != nil {
		return nil, fmt.Errorf("copy into datastore %s: %w", to.Name, err)
	}
	return res, nil
}

// moveFailed records a failed move of t (as the API last showed it): the
// tenant starts again where it was, its partial copy is dropped (now if
// it can be, else later), and the move is tried again after a while.
func (h *Host) moveFailed(ctx context.Context, t *Tenant, sl *slot, from, to *Datastore, cause error) error {
	h.mu.Lock()
	n := 1
	if f := sl.moveFailed; f != nil && f.to == to.Name {
		n = f.n + 1
	}
	wait := min(moveRetry<<(n-1), maxMoveRetry)
	sl.moveFailed = &moveFailure{to: to.Name, generation: t.Generation, n: n, retryAt: time.Now().Add(wait)}
	sl.provisioned = "" // provisioned again at its start: unfenced
	h.mu.Unlock()
	h.cfg.Log.Warn().Err(cause).Str("tenant", t.Name).Str("from", from.Name).Str("to", to.Name).Dur("retry", wait).
		Msg("the tenant's move failed; it runs where it was")
	dctx, cancel := context.WithTimeout(ctx, dropTimeout)
	dropped := h.dropCopy(dctx, to, t.Name) == nil
	cancel()
	_, err := h.writeStatus(ctx, t.Name, func(t *Tenant) {
		s := &t.Status
		if dropped {
			s.DropPending = without(s.DropPending, to.Name)
		}
		s.Phase, s.Message = PhasePending, "starting in datastore "+from.Name
		setCondition(s, ConditionPlaced, false, "MoveFailed", fmt.Sprintf(
			"moving to datastore %s failed: %v; the tenant stays in %s, unchanged; next try in %s", to.Name, cause, from.Name, wait))
	})
	return err
}

// dropPending drops the copies tenant name's status lists as pending
// (never the one its data is in), each taken off the list once it is
// gone. The status is read from the API, after the lock: hold
// lockTenant.
func (h *Host) dropPending(ctx context.Context, name string) error {
	t, err := h.getFresh(ctx, name)
	if t == nil || err != nil {
		return err
	}
	var errs []error
	var gone []string
	for _, name := range t.Status.DropPending {
		if name == t.Status.Datastore {
			gone = append(gone, name) // never dropped: it is the tenant's
			continue
		}
		ds := h.datastore(name)
		if ds == nil {
			errs = append(errs, fmt.Errorf("a copy in datastore %q, which this host was not given", name))
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, dropTimeout)
		err := h.dropCopy(dctx, ds, t.Name)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("drop the copy in datastore %s: %w", name, err))
			continue
		}
		h.cfg.Log.Info().Str("tenant", t.Name).Str("datastore", name).Msg("dropped an old copy of the tenant's data")
		gone = append(gone, name)
	}
	if len(gone) > 0 {
		if _, err := h.writeStatus(ctx, t.Name, func(t *Tenant) { t.Status.DropPending = without(t.Status.DropPending, gone...) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropData drops every copy of deleted tenant t's data: the one it runs
// on and those pending. A copy in a datastore this host was not given
// stays there (logged): it cannot hold the delete forever.
func (h *Host) dropData(ctx context.Context, t *Tenant) error {
	unlock := h.lockTenant(t.Name)
	defer unlock()
	// After the lock, as the API has it: a move may have just ended.
	if fresh, err := h.getFresh(ctx, t.Name); err != nil {
		return err
	} else if fresh != nil {
		t = fresh
	}
	var names []string
	for _, n := range append([]string{h.currentDatastore(t)}, t.Status.DropPending...) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		ds := h.datastore(n)
		if ds == nil {
			h.cfg.Log.Warn().Str("tenant", t.Name).Str("datastore", n).Msg("the deleted tenant's data stays in a datastore this host was not given")
			continue
		}
		if err := h.dropCopy(ctx, ds, t.Name); err != nil {
			return fmt.Errorf("drop tenant %s's data in datastore %s: %w", t.Name, n, err)
		}
	}
	return nil
}

// getFresh reads tenant name from the API, not the cache (nil: gone).
func (h *Host) getFresh(ctx context.Context, name string) (*Tenant, error) {
	u, err := h.tenants.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// writeStatus changes tenant name's status with f, read from the API and
// written back until no conflict: a step of a move or a restore must be
// recorded, not dropped for a newer version. It returns the tenant as
// written.
func (h *Host) writeStatus(ctx context.Context, name string, f func(*Tenant)) (*Tenant, error) {
	var out *Tenant
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		t, err := h.getFresh(ctx, name)
		if err != nil {
			return err
		}
		if t == nil {
			return fmt.Errorf("tenant %s is gone", name)
		}
		before, _ := json.Marshal(t.Status)
		f(t)
		t.Status.ObservedGeneration = t.Generation
		if after, _ := json.Marshal(t.Status); string(before) == string(after) {
			out = t
			return nil
		}
		u, err := ToUnstructured(t)
		if err != nil {
			return err
		}
		if u, err = h.tenants.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			return err
		}
		out, err = FromUnstructured(u)
		return err
	})
	return out, err
}

// setCondition sets condition typ of s.
func setCondition(s *Status, typ string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg})
}

// with is list with name added, unless it is there.
func with(list []string, name string) []string {
	if slices.Contains(list, name) {
		return list
	}
	return append(list, name)
}

// without is list without names.
func without(list []string, names ...string) []string {
	var out []string
	for _, n := range list {
		if !slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	return out
}
