package tenant

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sqlkube/sqlkube/datastore"
)

// restoreRetry is how long after a failed restore it is tried again (a
// database that was down, a backup file put in place).
const restoreRetry = 30 * time.Second

// placeTenant places a tenant whose status names no datastore yet: one
// restored from a backup once its data is in, or one whose spec named no
// datastore of the host's, once it names one.
func (h *Host) placeTenant(ctx context.Context, t *Tenant) (time.Duration, error) {
	name := h.initialDatastore(t)
	if name == "" {
		return 0, h.setStatus(ctx, t, func(s *Status) {
			s.Phase, s.Message = PhaseFailed, fmt.Sprintf("spec.datastore names %q, which this host was not given (it has %s)", t.Spec.Datastore, h.datastoreNames())
		})
	}
	if t.Spec.RestoreFrom == nil {
		return 0, h.setStatus(ctx, t, func(s *Status) { s.Datastore = name })
	}
	return h.restore(ctx, t, h.datastore(name))
}

// restore fills new tenant t's place on ds from its spec's backup, then
// places it there. Until then the tenant has never run, and nothing
// starts it; a failure leaves it unplaced (its partial copy dropped, or
// among the copies to drop) and is tried again later. The token comes
// from the backup, so the tenant has the backup's identity.
func (h *Host) restore(ctx context.Context, t *Tenant, ds *Datastore) (time.Duration, error) {
	if v, ok := h.restoreFailed.Load(t.Name); ok {
		if f := v.(retryAfter); f.generation == t.Generation && time.Now().Before(f.at) {
			return time.Until(f.at), nil
		}
	}
	fail := func(err error) (time.Duration, error) {
		h.restoreFailed.Store(t.Name, retryAfter{generation: t.Generation, at: time.Now().Add(restoreRetry)})
		_, werr := h.writeStatus(ctx, t.Name, func(t *Tenant) {
			s := &t.Status
			s.Phase, s.Message = PhaseFailed, "restore: "+err.Error()
			setCondition(s, ConditionRestored, false, "RestoreFailed", err.Error())
		})
		return restoreRetry, werr
	}
	path, waiting, err := h.restoreFile(ctx, t.Spec.RestoreFrom)
	if err != nil {
		return fail(err)
	}
	if waiting != "" {
		return 2 * time.Second, h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhasePending, waiting })
	}
	hdr, err := datastore.ReadHeader(ctx, path)
	if err != nil {
		return fail(err)
	}
	token := hdr.Meta[MetaToken]
	if token == "" {
		return fail(fmt.Errorf("%s is not a tenant backup (its header carries no tenant token); a cluster's `sqlkube datastore backup` is restored with `sqlkube datastore restore`", path))
	}
	if got, err := h.createToken(ctx, t, token); err != nil {
		return 0, err
	} else if got != token {
		return fail(fmt.Errorf("the Secret %s/%s-token holds another token than the backup's, which opens its identity", Namespace, t.Name))
	}

	unlock := h.lockTenant(t.Name)
	defer unlock()
	// The cache may trail the host's own last write (a restore just
	// made): the API decides, and a placed tenant is never restored over.
	fresh, err := h.getFresh(ctx, t.Name)
	if err != nil || fresh == nil || fresh.DeletionTimestamp != nil || fresh.Status.Datastore != "" {
		return 0, err
	}
	log := h.cfg.Log.With().Str("tenant", t.Name).Str("datastore", ds.Name).Str("from", path).Logger()
	log.Info().Msg("restoring the tenant")
	start := time.Now()
	// The target first among the copies to drop: a host stopped from here
	// on drops it if the tenant is deleted, and replaces it if not.
	if _, err := h.writeStatus(ctx, t.Name, func(t *Tenant) {
		s := &t.Status
		s.Phase, s.Message = PhaseRestoring, "restoring from "+path
		s.DropPending = with(s.DropPending, ds.Name)
	}); err != nil {
		return 0, err
	}
	src, err := datastore.OpenSource(ctx, path)
	if err != nil {
		return fail(err)
	}
	res, err := h.copyInto(ctx, src, ds, t.Name)
	src.Close()
	if err != nil {
		log.Warn().Err(err).Msg("the tenant's restore failed")
		dctx, cancel := context.WithTimeout(ctx, dropTimeout)
		if h.dropCopy(dctx, ds, t.Name) == nil {
			_, _ = h.writeStatus(ctx, t.Name, func(t *Tenant) { t.Status.DropPending = without(t.Status.DropPending, ds.Name) })
		}
		cancel()
		return fail(fmt.Errorf("into datastore %s: %w", ds.Name, err))
	}
	_, err = h.writeStatus(ctx, t.Name, func(t *Tenant) {
		s := &t.Status
		s.Datastore = ds.Name
		s.DropPending = without(s.DropPending, ds.Name)
		s.Phase, s.Message = PhasePending, "starting"
		setCondition(s, ConditionRestored, true, "Restored", fmt.Sprintf("from %s at revision %d (%d keys, checksum %s)",
			path, res.Source.Revision, res.Keys, res.Checksum[:16]))
	})
	if err == nil {
		h.restoreFailed.Delete(t.Name)
		log.Info().Int64("revision", res.Source.Revision).Int64("keys", res.Keys).Dur("took", time.Since(start)).Msg("tenant restored")
	}
	return 0, err
}

// retryAfter holds a failed restore until at, unless the spec changes.
type retryAfter struct {
	generation int64
	at         time.Time
}

// restoreFile is the backup file rs names. waiting, if set, says why
// there is none yet (its TenantBackup has not completed).
func (h *Host) restoreFile(ctx context.Context, rs *RestoreSource) (path, waiting string, err error) {
	switch {
	case (rs.Backup == "") == (rs.File == ""):
		return "", "", fmt.Errorf("spec.restoreFrom names one of backup or file")
	case rs.File != "":
		if !filepath.IsAbs(rs.File) {
			return "", "", fmt.Errorf("spec.restoreFrom.file %q is not an absolute path", rs.File)
		}
		return rs.File, "", nil
	}
	u, err := h.dyn.Resource(BackupGVR).Get(ctx, rs.Backup, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", "", fmt.Errorf("there is no TenantBackup %s", rs.Backup)
	}
	if err != nil {
		return "", "", err
	}
	b, err := BackupFromUnstructured(u)
	if err != nil {
		return "", "", err
	}
	switch b.Status.Phase {
	case BackupCompleted:
		return b.Status.File, "", nil
	case BackupFailed:
		return "", "", fmt.Errorf("TenantBackup %s failed: %s", b.Name, b.Status.Message)
	}
	return "", fmt.Sprintf("waiting for TenantBackup %s to complete", b.Name), nil
}
