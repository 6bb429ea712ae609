package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/datastore"
	"github.com/sqlkube/sqlkube/tenant"
)

// `sqlkube tenant move|backup|restore`: what the Tenant and TenantBackup
// resources do, and waiting for it.

func newTenantMoveCommand(clients func() (dynamic.ResourceInterface, kubernetes.Interface, error), timeout *time.Duration) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "move NAME --datastore DATASTORE",
		Short: "Move a tenant's data to another of the host's datastores, and wait until it serves from there",
		Long: `Move a tenant's data to another of the host's datastores (its spec.datastore;
'sqlite', 'default', or a NAME of the host's --tenant-datastore NAME=DSN).

The host stops the tenant, copies its data with 'sqlkube datastore migrate''s
code (every key, lease and log row, the revision and the compaction), reads
the copy back and checks it, switches the tenant to it, starts it there, and
drops the old copy (on PostgreSQL: its schema, and its role unless the tenant
now lives in another database of the same server). The tenant is down while
its data is copied; clients reconnect, and the resourceVersions they hold
stay valid. If anything fails before the switch, the tenant runs where it
was, unchanged, its condition Placed says why, and the host tries again
later.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return errors.New("--datastore is required")
			}
			tenants, _, err := clients()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
			defer cancel()
			before, err := getTenant(ctx, tenants, args[0])
			if err != nil {
				return err
			}
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"datastore": to}})
			if _, err := tenants.Patch(ctx, args[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
			t, err := waitMoved(ctx, tenants, args[0], to, before.Spec.Datastore != to)
			if err != nil {
				return err
			}
			msg := ""
			if c := meta.FindStatusCondition(t.Status.Conditions, tenant.ConditionPlaced); c != nil {
				msg = ": " + c.Message
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tenant %s is in datastore %s%s\n", t.Name, t.Status.Datastore, msg)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "datastore", "", "the datastore to move it to")
	return cmd
}

// waitMoved waits until tenant name runs (or is suspended) with its data
// in datastore to, or fails with why it is not: a datastore the host has
// not, or a move that failed (one this command asked for, changed, when
// the spec said to already).
func waitMoved(ctx context.Context, tenants dynamic.ResourceInterface, name, to string, changed bool) (*tenant.Tenant, error) {
	var last *tenant.Tenant
	var failed error
	sawMoving := changed
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		t, err := getTenant(ctx, tenants, name)
		if err != nil {
			return false, nil
		}
		last = t
		if t.Status.ObservedGeneration != t.Generation {
			return false, nil
		}
		if t.Status.Datastore == to && (t.Status.Phase == tenant.PhaseReady || t.Status.Phase == tenant.PhaseSuspended) {
			return true, nil
		}
		c := meta.FindStatusCondition(t.Status.Conditions, tenant.ConditionPlaced)
		switch {
		case c == nil:
		case c.Reason == "Moving":
			sawMoving = true
		case c.Reason == "UnknownDatastore", c.Reason == "MoveFailed" && sawMoving && t.Status.Phase != tenant.PhaseMoving:
			failed = fmt.Errorf("tenant %s not moved: %s", name, c.Message)
			return false, failed
		}
		return false, nil
	})
	if failed != nil {
		return nil, failed
	}
	if err != nil {
		msg := "no status yet"
		if last != nil {
			msg = fmt.Sprintf("%s, in datastore %q", last.Status.Phase, last.Status.Datastore)
			if last.Status.Message != "" {
				msg += ": " + last.Status.Message
			}
		}
		return nil, fmt.Errorf("tenant %s is not in datastore %s yet (%s): %w", name, to, msg, err)
	}
	return last, nil
}

func newTenantBackupCommand(dynClient func() (dynamic.Interface, kubernetes.Interface, error), timeout *time.Duration) *cobra.Command {
	var to, name string
	var keep, force bool
	cmd := &cobra.Command{
		Use:   "backup TENANT [--to FILE]",
		Short: "Back up a tenant while it runs (a TenantBackup) and copy the backup to a file",
		Long: `Back up a tenant while it runs: this makes a TenantBackup object, which the
host writes, in one consistent read of the tenant's datastore, to a file of
its --tenant-backup-dir: a sqlkube dump (as 'sqlkube datastore backup' writes)
of every key, lease and log row at one revision, whose header also carries
the tenant's name, spec and cluster token. The token opens the tenant's
identity (its CAs and keys, sealed in its data), so a backup restores the
tenant even after it was deleted ('sqlkube tenant restore'), and is as
secret as the tenant itself: keep it as you keep the tenant's admin
kubeconfig (the file is written 0600).

With --to, the backup is copied to FILE (the host's file must be readable
here: run this on the host's machine) and the TenantBackup with the host's
file is deleted, unless --keep. Without --to, it stays on the host:
'sqlkube tenant restore NEW --backup NAME' restores it, 'kubectl delete
tenantbackup NAME' deletes it. A TenantBackup is not deleted with its
tenant.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dyn, _, err := dynClient()
			if err != nil {
				return err
			}
			if to != "" && !force {
				if _, err := os.Stat(to); err == nil {
					return fmt.Errorf("%s exists (--force replaces it)", to)
				}
			}
			if name == "" {
				name = args[0] + "-" + time.Now().UTC().Format("20060102-150405")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
			defer cancel()
			backups := dyn.Resource(tenant.BackupGVR)
			u, err := tenant.BackupToUnstructured(&tenant.Backup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tenant.BackupSpec{Tenant: args[0]}})
			if err != nil {
				return err
			}
			if _, err := backups.Create(ctx, u, metav1.CreateOptions{}); err != nil {
				return err
			}
			b, err := waitBackup(ctx, backups, name)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if to == "" {
				fmt.Fprintf(w, "tenant %s backed up at revision %d (%d keys, %d bytes): TenantBackup %s, the host's file %s\nRestore: sqlkube tenant restore NEW --backup %s\n",
					args[0], b.Status.Revision, b.Status.Keys, b.Status.Size, name, b.Status.File, name)
				return nil
			}
			if err := copyFile(b.Status.File, to); err != nil {
				return fmt.Errorf("copy the backup here (TenantBackup %s keeps it on the host): %w", name, err)
			}
			if !keep { // and wait until the host deleted its file
				if err := backups.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
				err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
					_, err := backups.Get(ctx, name, metav1.GetOptions{})
					return apierrors.IsNotFound(err), nil
				})
				if err != nil {
					return fmt.Errorf("TenantBackup %s is still being deleted: %w", name, err)
				}
			}
			fmt.Fprintf(w, "tenant %s backed up at revision %d (%d keys, %d bytes) to %s\nRestore: sqlkube tenant restore NEW --from %s\n",
				args[0], b.Status.Revision, b.Status.Keys, b.Status.Size, to, to)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&to, "to", "", "copy the backup to this file, and delete the host's (unless --keep)")
	fl.StringVar(&name, "name", "", "the TenantBackup's name (default: TENANT-YYYYMMDD-HHMMSS, UTC)")
	fl.BoolVar(&keep, "keep", false, "with --to: keep the TenantBackup and the host's file too")
	fl.BoolVar(&force, "force", false, "replace --to's file if it exists")
	return cmd
}

// waitBackup waits until TenantBackup name completes, or fails with why
// it did not.
func waitBackup(ctx context.Context, backups dynamic.ResourceInterface, name string) (*tenant.Backup, error) {
	var last *tenant.Backup
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		u, err := backups.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if last, err = tenant.BackupFromUnstructured(u); err != nil {
			return false, err
		}
		switch last.Status.Phase {
		case tenant.BackupCompleted:
			return true, nil
		case tenant.BackupFailed:
			return false, fmt.Errorf("TenantBackup %s failed: %s", name, last.Status.Message)
		}
		return false, nil
	})
	if err != nil && last != nil && last.Status.Phase != tenant.BackupFailed {
		return nil, fmt.Errorf("TenantBackup %s is %q (%s): %w", name, last.Status.Phase, last.Status.Message, err)
	}
	return last, err
}

// copyFile copies from to to, 0600, through a temporary file renamed
// into place.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), to)
}

func newTenantRestoreCommand(dynClient func() (dynamic.Interface, kubernetes.Interface, error), timeout *time.Duration) *cobra.Command {
	var from, backup, ds, quota, out string
	cmd := &cobra.Command{
		Use:   "restore NAME (--from FILE | --backup TENANTBACKUP)",
		Short: "Create a tenant from a backup, and wait until it serves",
		Long: `Create tenant NAME from a backup ('sqlkube tenant backup'): a Tenant whose
spec.restoreFrom names the file (--from: a path on the host's machine, where
the host reads it) or a TenantBackup (--backup). The host fills the tenant's
datastore from it before the tenant first starts: it serves the same
objects, with the same resourceVersions, at the backup's revision, and has
the backed-up tenant's identity (its token is in the backup), so the old
tenant's admin kubeconfig and service-account tokens work against it.

Restoring under a new name while the original still runs makes a twin
that trusts the same credentials. The quota and version come from the
backup's spec unless given.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if why := tenant.ValidName(name); why != "" {
				return fmt.Errorf("%q: %s", name, why)
			}
			if (from == "") == (backup == "") {
				return errors.New("give one of --from FILE and --backup TENANTBACKUP")
			}
			dyn, cs, err := dynClient()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
			defer cancel()
			t := &tenant.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tenant.Spec{Datastore: ds}}
			if from != "" {
				if from, err = filepath.Abs(from); err != nil {
					return err
				}
				h, err := datastore.ReadHeader(ctx, from)
				if err != nil {
					return fmt.Errorf("--from: %w", err)
				}
				if h.Meta[tenant.MetaToken] == "" {
					return fmt.Errorf("--from: %s is not a tenant backup (it carries no tenant token): restore a cluster's backup with 'sqlkube datastore restore'", from)
				}
				var spec tenant.Spec
				if err := json.Unmarshal([]byte(h.Meta[tenant.MetaSpec]), &spec); err == nil {
					t.Spec.Quota, t.Spec.Version = spec.Quota, spec.Version
				}
				t.Spec.RestoreFrom = &tenant.RestoreSource{File: from}
			} else {
				t.Spec.RestoreFrom = &tenant.RestoreSource{Backup: backup}
			}
			if t.Spec.Quota, err = parseQuota(quota); err != nil {
				return err
			}
			u, err := tenant.ToUnstructured(t)
			if err != nil {
				return err
			}
			tenants := dyn.Resource(tenant.GVR)
			if _, err := tenants.Create(ctx, u, metav1.CreateOptions{}); err != nil {
				return err
			}
			got, err := waitRestored(ctx, tenants, name)
			if err != nil {
				return err
			}
			if c := meta.FindStatusCondition(got.Status.Conditions, tenant.ConditionRestored); c != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "tenant %s restored %s\n", name, c.Message)
			}
			return writeTenantKubeconfig(ctx, cs, got, out, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", "", "a backup file ('sqlkube tenant backup --to'), read by the host")
	fl.StringVar(&backup, "backup", "", "a TenantBackup to restore")
	fl.StringVar(&ds, "datastore", "", "the host's datastore to restore it into (default: the host's default)")
	fl.StringVar(&quota, "quota", "", "datastore quota, e.g. 512Mi (default: the backup's)")
	fl.StringVar(&out, "out", "", "write the admin kubeconfig here (default: print the Secret to read it from)")
	return cmd
}

// waitRestored waits until restored tenant name serves, or fails with
// why its restore failed.
func waitRestored(ctx context.Context, tenants dynamic.ResourceInterface, name string) (*tenant.Tenant, error) {
	var failed error
	t, err := func() (*tenant.Tenant, error) {
		var last *tenant.Tenant
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			t, err := getTenant(ctx, tenants, name)
			if err != nil {
				return false, nil
			}
			last = t
			if c := meta.FindStatusCondition(t.Status.Conditions, tenant.ConditionRestored); c != nil && c.Status == metav1.ConditionFalse {
				failed = fmt.Errorf("tenant %s not restored: %s (the host tries again; delete the tenant to give up)", name, c.Message)
				return false, failed
			}
			return t.Status.ObservedGeneration == t.Generation && t.Status.Phase == tenant.PhaseReady, nil
		})
		return last, err
	}()
	if failed != nil {
		return nil, failed
	}
	if err != nil {
		msg := "no status yet"
		if t != nil && t.Status.Phase != "" {
			msg = t.Status.Phase
			if t.Status.Message != "" {
				msg += ": " + t.Status.Message
			}
		}
		return nil, fmt.Errorf("tenant %s is not Ready (%s): %w", name, msg, err)
	}
	return t, nil
}
