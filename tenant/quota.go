package tenant

import (
	"context"
	"fmt"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// quotaBytes is tenant t's datastore quota: its spec.quota, else the
// host's default (HostConfig.QuotaBytes), 0 made
// sqlstore.DefaultQuotaBytes; negative: none.
func (h *Host) quotaBytes(t *Tenant) int64 {
	q := h.cfg.QuotaBytes
	if t.Spec.Quota != nil {
		q = t.Spec.Quota.Value()
	}
	if q == 0 {
		q = sqlstore.DefaultQuotaBytes
	}
	return q
}

// applyQuota gives running tenant t's store the quota it asks for, and
// returns what its status should say about its space ("" when its
// writes are taken).
//
// A tenant has no etcd endpoint of its own, so no `etcdctl alarm
// disarm`: the Tenant's quota is the operator's lever. When the quota
// differs from the one the host last applied (Status.QuotaBytes, so a
// quota changed while the host was down counts too), the host does what
// an etcd operator does after restarting etcd with a larger
// --quota-backend-bytes: it disarms the NOSPACE alarm, and only if the
// store is now under its quota. A store still over it keeps its alarm,
// as etcd's would raise it again at the next write; so does one whose
// quota did not change (a host restart disarms nothing).
func (h *Host) applyQuota(ctx context.Context, t *Tenant, in *instance, quota int64) (string, error) {
	st := in.openStore()
	if st == nil {
		return "", nil // stopping; the instance's end requeues the tenant
	}
	st.SetQuotaBytes(quota)
	alarms, err := st.Alarms(ctx)
	if err != nil {
		return "", err
	}
	var noSpace []sqlstore.Alarm
	for _, a := range alarms {
		if a.Type == sqlstore.AlarmNoSpace {
			noSpace = append(noSpace, a)
		}
	}
	if len(noSpace) == 0 {
		return "", nil
	}
	size, err := st.Size(ctx)
	if err != nil {
		return "", err
	}
	if t.Status.QuotaBytes != quota && (quota < 0 || size < quota) {
		for _, a := range noSpace {
			if _, err := st.DeactivateAlarm(ctx, a); err != nil {
				return "", err
			}
		}
		h.cfg.Log.Info().Str("tenant", t.Name).Int64("sizeBytes", size).Int64("quotaBytes", quota).
			Msg("the tenant's quota changed and its datastore is under it: NOSPACE alarm cleared, writes are taken again")
		return "", nil
	}
	return fmt.Sprintf("datastore space exceeded (NOSPACE alarm, %s of its quota %s): writes are refused until spec.quota is raised",
		bytesString(size), bytesString(quota)), nil
}

// bytesString is n bytes for people: "39.1 MiB", "1.0 GiB" ("none" when
// negative, as a quota).
func bytesString(n int64) string {
	switch {
	case n < 0:
		return "none"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}
