// Package etcdshim serves the etcd v3 gRPC API (KV, Watch, Lease,
// Maintenance, Cluster) over a Backend, normally the SQL revision log in
// etcdshim/sqlstore. gRPC and protobuf types stay in this package.
package etcdshim

import (
	"context"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// Backend is the key-value store behind the etcd API. Its errors are the
// sqlstore sentinels (sqlstore.ErrCompacted, ErrLeaseNotFound, …), which
// this package turns into etcd's gRPC errors.
type Backend interface {
	Range(ctx context.Context, req sqlstore.RangeRequest) (*sqlstore.RangeResult, error)
	Put(ctx context.Context, req sqlstore.PutRequest) (*sqlstore.PutResult, int64, error)
	DeleteRange(ctx context.Context, req sqlstore.DeleteRequest) (*sqlstore.DeleteResult, int64, error)
	Txn(ctx context.Context, req *sqlstore.TxnRequest) (*sqlstore.TxnResult, error)
	Compact(ctx context.Context, rev int64) (int64, error)

	// Watch delivers batches of whole revisions from startRev (<= 0: after
	// the current revision) until ctx ends; see sqlstore.Store.Watch.
	Watch(ctx context.Context, key, end []byte, startRev int64, deliver func(sqlstore.WatchBatch) error) (*sqlstore.Watch, error)

	LeaseGrant(ctx context.Context, id, ttl int64) (*sqlstore.Lease, error)
	LeaseRevoke(ctx context.Context, id int64) (int64, error)
	LeaseKeepAlive(ctx context.Context, id int64) (int64, error)
	LeaseTimeToLive(ctx context.Context, id int64, keys bool) (*sqlstore.Lease, error)
	Leases(ctx context.Context) ([]int64, error)

	// Revisions returns the current and the compacted revision.
	Revisions(ctx context.Context) (current, compacted int64, err error)
	// KnownRevisions returns the current and compacted revisions as this
	// process last saw them, without asking the database.
	KnownRevisions() (current, compacted int64)
	// Size is the store's size in bytes, as its quota counts it;
	// SizeInUse the part of it that holds data.
	Size(ctx context.Context) (int64, error)
	SizeInUse(ctx context.Context) (int64, error)
	// QuotaBytes is the store's space quota; negative: none. Over it,
	// Put, Txn and LeaseGrant fail with a *sqlstore.QuotaError, and the
	// server raises the NOSPACE alarm.
	QuotaBytes() int64
	Defragment(ctx context.Context) error

	// Alarms, ActivateAlarm and DeactivateAlarm keep the store's alarms;
	// see sqlstore.Store.
	Alarms(ctx context.Context) ([]sqlstore.Alarm, error)
	ActivateAlarm(ctx context.Context, a sqlstore.Alarm) error
	DeactivateAlarm(ctx context.Context, a sqlstore.Alarm) (bool, error)
}

var _ Backend = (*sqlstore.Store)(nil)
