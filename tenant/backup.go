package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/sqlkube/sqlkube/datastore"
)

// A TenantBackup is written once: the host reads the tenant's data in
// one snapshot while it runs (or while it is suspended, without waking
// it), writes it to BackupDir/NAME.sqlkube.gz as a sqlkube dump whose
// header carries the tenant's name, spec and token, reads the file back
// and checks it, and reports where it is. Deleting the TenantBackup
// deletes its file; deleting the tenant does not delete its backups.

// backupFile is where TenantBackup name's file goes.
func (h *Host) backupFile(name string) string {
	return filepath.Join(h.cfg.BackupDir, name+".sqlkube.gz")
}

// watchBackups makes the TenantBackup informer of factory feed the
// backups queue; it returns its HasSynced.
func (h *Host) watchBackups(factory dynamicinformer.DynamicSharedInformerFactory) (cache.InformerSynced, error) {
	inf := factory.ForResource(BackupGVR)
	h.mu.Lock()
	h.backupsLister = inf.Lister()
	h.mu.Unlock()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			h.backups.Add(key)
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	})
	return inf.Informer().HasSynced, err
}

func (h *Host) nextBackup(ctx context.Context) bool {
	name, quit := h.backups.Get()
	if quit {
		return false
	}
	defer h.backups.Done(name)
	requeue, err := h.reconcileBackup(ctx, name)
	switch {
	case err != nil && ctx.Err() == nil:
		h.cfg.Log.Warn().Err(err).Str("backup", name).Msg("tenant backup not reconciled; retrying")
		h.backups.AddRateLimited(name)
	case requeue > 0:
		h.backups.Forget(name)
		h.backups.AddAfter(name, requeue)
	default:
		h.backups.Forget(name)
	}
	return true
}

// getBackup is TenantBackup name from the informer's cache (nil: gone).
func (h *Host) getBackup(name string) (*Backup, error) {
	return fromCache(h.backupsLister, "tenant backup", name, BackupFromUnstructured)
}

// reconcileBackup makes TenantBackup name's file, once, or deletes it
// with the TenantBackup.
func (h *Host) reconcileBackup(ctx context.Context, name string) (time.Duration, error) {
	if !h.leading.Load() {
		return 0, nil // the leading host's (requeueAll when this one leads)
	}
	b, err := h.getBackup(name)
	if err != nil || b == nil {
		return 0, err
	}
	backups := h.dyn.Resource(BackupGVR)
	if b.DeletionTimestamp != nil {
		return 0, h.removeBackup(ctx, b)
	}
	if !slices.Contains(b.Finalizers, BackupFinalizer) {
		b.Finalizers = append(b.Finalizers, BackupFinalizer)
		u, err := BackupToUnstructured(b)
		if err != nil {
			return 0, err
		}
		if _, err := backups.Update(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return 0, err
		}
		return 0, nil
	}
	switch b.Status.Phase {
	case BackupCompleted, BackupFailed:
		return 0, nil
	}
	fail := func(err error) (time.Duration, error) {
		return 0, settledOK(h.writeBackupStatus(ctx, name, func(s *BackupStatus) {
			s.Phase, s.Message = BackupFailed, err.Error()
			s.CompletionTime = &metav1.Time{Time: time.Now()}
		}))
	}
	t, err := h.get(b.Spec.Tenant)
	switch {
	case err != nil:
		return 0, err
	case t == nil:
		return fail(fmt.Errorf("there is no tenant %q", b.Spec.Tenant))
	case t.DeletionTimestamp != nil:
		return fail(fmt.Errorf("tenant %s is being deleted", t.Name))
	case t.Status.Datastore == "":
		err := h.writeBackupStatus(ctx, name, func(s *BackupStatus) {
			s.Phase, s.Message = BackupPending, "waiting for the tenant's data to be placed"
		})
		if errors.Is(err, errBackupSettled) {
			return 0, nil
		}
		return 2 * time.Second, err
	}
	// Running is written to the API's copy, which is never behind: a
	// TenantBackup that completed since the informer's copy was taken
	// is not written again.
	if err := h.writeBackupStatus(ctx, name, func(s *BackupStatus) {
		s.Phase, s.Message = BackupRunning, ""
		s.StartTime = &metav1.Time{Time: time.Now()}
	}); err != nil {
		return 0, settledOK(err)
	}
	file := h.backupFile(b.Name)
	res, ds, err := h.writeBackup(ctx, t.Name, file)
	if err != nil {
		h.cfg.Log.Warn().Err(err).Str("backup", name).Str("tenant", t.Name).Msg("tenant backup failed")
		return fail(err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return fail(err)
	}
	h.cfg.Log.Info().Str("backup", name).Str("tenant", t.Name).Str("file", file).Int64("revision", res.Source.Revision).
		Int64("keys", res.Keys).Dur("took", res.Took).Msg("tenant backed up")
	return 0, h.writeBackupStatus(ctx, name, func(s *BackupStatus) {
		s.Phase, s.Message = BackupCompleted, ""
		s.File, s.Datastore = file, ds
		s.Revision, s.Keys, s.Size, s.Checksum = res.Source.Revision, res.Keys, fi.Size(), res.Checksum
		s.CompletionTime = &metav1.Time{Time: time.Now()}
	})
}

// settledOK is err, but nil for errBackupSettled.
func settledOK(err error) error {
	if errors.Is(err, errBackupSettled) {
		return nil
	}
	return err
}

// writeBackup writes tenant name's data, as its datastore holds it at
// one revision, to file, and checks the file. It returns what was copied
// and the datastore it was read from.
func (h *Host) writeBackup(ctx context.Context, name, file string) (*datastore.Result, string, error) {
	unlock := h.lockTenant(name)
	defer unlock()
	// After the lock, as the API has it: a move may have just ended.
	t, err := h.getFresh(ctx, name)
	switch {
	case err != nil:
		return nil, "", err
	case t == nil || t.DeletionTimestamp != nil:
		return nil, "", fmt.Errorf("tenant %s is gone", name)
	}
	ds := h.datastore(h.currentDatastore(t))
	if ds == nil {
		return nil, "", fmt.Errorf("its data is in datastore %q, which this host was not given", t.Status.Datastore)
	}
	token, err := h.readToken(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("its token: %w", err)
	}
	spec := t.Spec
	spec.RestoreFrom = nil
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(h.cfg.BackupDir, 0o700); err != nil {
		return nil, "", err
	}
	removeTemps(file) // of an attempt a stopped host left
	src, err := h.openSource(ctx, ds, name)
	if err != nil {
		return nil, "", fmt.Errorf("read datastore %s: %w", ds.Name, err)
	}
	defer src.Close()
	dst, err := datastore.OpenSink(ctx, file, true) // an attempt's that was not recorded
	if err != nil {
		return nil, "", err
	}
	res, err := datastore.CopyVerified(ctx, src, dst, func(ctx context.Context) (datastore.Source, error) {
		return datastore.OpenSource(ctx, file)
	}, false, datastore.Options{Meta: map[string]string{MetaTenant: name, MetaToken: token, MetaSpec: string(specJSON)}})
	if err != nil {
		os.Remove(file)
		return nil, "", err
	}
	return res, ds.Name, nil
}

// removeBackup deletes TenantBackup b's file, then its finalizer.
func (h *Host) removeBackup(ctx context.Context, b *Backup) error {
	if !slices.Contains(b.Finalizers, BackupFinalizer) {
		return nil
	}
	file := h.backupFile(b.Name) // never a path the status could name elsewhere
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	removeTemps(file)
	var keep []string
	for _, f := range b.Finalizers {
		if f != BackupFinalizer {
			keep = append(keep, f)
		}
	}
	b.Finalizers = keep
	u, err := BackupToUnstructured(b)
	if err != nil {
		return err
	}
	_, err = h.dyn.Resource(BackupGVR).Update(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version is queued, or it is gone
	}
	return err
}

// removeTemps removes the temporary files a dump to file leaves when its
// writer stops before it commits.
func removeTemps(file string) {
	tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+".*.tmp"))
	for _, f := range tmps {
		os.Remove(f)
	}
}

// errBackupSettled: the TenantBackup has completed or failed already, so
// its status does not change again.
var errBackupSettled = errors.New("tenant backup already settled")

// writeBackupStatus changes TenantBackup name's status with f, read from
// the API and written back until no conflict; unchanged, it writes
// nothing. A settled TenantBackup (completed or failed) is left as it is,
// with errBackupSettled.
func (h *Host) writeBackupStatus(ctx context.Context, name string, f func(*BackupStatus)) error {
	backups := h.dyn.Resource(BackupGVR)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := backups.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		b, err := BackupFromUnstructured(u)
		if err != nil {
			return err
		}
		switch b.Status.Phase {
		case BackupCompleted, BackupFailed:
			// Settled: the informer's copy this reconcile began from
			// was older than this.
			return errBackupSettled
		}
		before, _ := json.Marshal(b.Status)
		f(&b.Status)
		if after, _ := json.Marshal(b.Status); string(before) == string(after) {
			return nil
		}
		if u, err = BackupToUnstructured(b); err != nil {
			return err
		}
		_, err = backups.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	})
}
