package storage

import (
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/sqlkube/sqlkube/etcdshim"
)

// IsNoSpace reports whether err is etcd's refusal of a write past the
// datastore's space quota or while its NOSPACE alarm is active
// ("etcdserver: mvcc: database space exceeded"), as the etcd client
// returns it to the etcd3 store, which returns it unchanged.
func IsNoSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace)
}

// IsDiskFull reports whether err is sqlkube's refusal of a write while
// the disk under a SQLite datastore is full (etcdshim.ErrGRPCDiskFull),
// through the in-process client or over gRPC.
func IsDiskFull(err error) bool {
	return errors.Is(err, etcdshim.ErrGRPCDiskFull)
}
