package etcdshim

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// ErrGRPCDiskFull refuses a write that could grow the store while the
// disk under a SQLite store is full (sqlstore.ErrDiskFull). etcd has no
// such answer (it stops when its disk is full); the code is
// ResourceExhausted, which gRPC gives for "the entire file system is out
// of space", and the message is sqlkube's, so that clients can tell it
// from the NOSPACE alarm's: nothing needs disarming, writes resume by
// themselves.
var ErrGRPCDiskFull = status.Error(codes.ResourceExhausted, "etcdserver: sqlkube: the datastore's disk is full; writes resume once there is space")

// toGRPC maps a backend error to the error etcd would return, so etcd
// clients recognise it (clientv3 matches on the message).
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	switch {
	case errors.Is(err, sqlstore.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, sqlstore.ErrFutureRevision):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, sqlstore.ErrLeaseNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, sqlstore.ErrLeaseExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, sqlstore.ErrLeaseTTLTooBig):
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	case errors.Is(err, sqlstore.ErrKeyNotFound):
		return rpctypes.ErrGRPCKeyNotFound
	case errors.Is(err, sqlstore.ErrDuplicateKey):
		return rpctypes.ErrGRPCDuplicateKey
	case errors.Is(err, sqlstore.ErrEmptyKey):
		return rpctypes.ErrGRPCEmptyKey
	case errors.Is(err, sqlstore.ErrKeyTooLong):
		return status.Error(codes.InvalidArgument, "etcdserver: key is too long (sqlkube keys are at most 2048 bytes)")
	case errors.Is(err, sqlstore.ErrNoSpace):
		return rpctypes.ErrGRPCNoSpace
	case errors.Is(err, sqlstore.ErrDiskFull):
		return ErrGRPCDiskFull
	case errors.Is(err, sqlstore.ErrResultTooLarge):
		// What gRPC answers for a response over its send limit.
		return status.Error(codes.ResourceExhausted, "etcdserver: txn response would be larger than gRPC sends (2 GiB)")
	case errors.Is(err, sqlstore.ErrClosed):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCTimeout
	}
	return status.Error(codes.Unavailable, "etcdserver: "+err.Error())
}
