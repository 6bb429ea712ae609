package sqlstore

import "errors"

// KeyValue is one version of a key, as etcd describes it.
type KeyValue struct {
	Key            []byte
	Value          []byte
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          int64
}

// EventType says whether an event wrote or removed a key.
type EventType int

// Event types.
const (
	EventPut EventType = iota
	EventDelete
)

// Event is one change of one key. For a delete, KV carries the key and the
// revision of the delete (ModRevision) and nothing else. PrevKV is the key's
// version before the change, nil if it did not exist.
type Event struct {
	Type   EventType
	KV     KeyValue
	PrevKV *KeyValue
}

// SortOrder and SortTarget follow etcd's RangeRequest.
type (
	SortOrder  int
	SortTarget int
)

// Sort orders.
const (
	SortNone SortOrder = iota
	SortAscend
	SortDescend
)

// Sort targets.
const (
	SortByKey SortTarget = iota
	SortByVersion
	SortByCreate
	SortByMod
	SortByValue
)

// RangeRequest reads keys. End follows etcd: nil means the single key Key,
// "\x00" means every key >= Key, anything else is the exclusive upper bound.
// If Revision <= 0, the range reads the current revision.
type RangeRequest struct {
	Key, End          []byte
	Revision          int64
	Limit             int64
	SortOrder         SortOrder
	SortTarget        SortTarget
	KeysOnly          bool
	CountOnly         bool
	MinModRevision    int64
	MaxModRevision    int64
	MinCreateRevision int64
	MaxCreateRevision int64
}

// RangeResult is the answer to a RangeRequest. Count is the number of keys
// in the range, before limit and revision filters.
type RangeResult struct {
	KVs      []KeyValue
	More     bool
	Count    int64
	Revision int64
}

// PutRequest writes one key.
type PutRequest struct {
	Key, Value  []byte
	Lease       int64
	PrevKV      bool
	IgnoreValue bool
	IgnoreLease bool
}

// PutResult carries the previous version of the key when asked for.
type PutResult struct {
	PrevKV *KeyValue
}

// DeleteRequest removes a key or a range (End as in RangeRequest).
type DeleteRequest struct {
	Key, End []byte
	PrevKV   bool
}

// DeleteResult says how many keys were removed, and which when asked for.
type DeleteResult struct {
	Deleted int64
	PrevKVs []KeyValue
}

// CompareTarget and CompareResult follow etcd's Compare.
type (
	CompareTarget int
	CompareResult int
)

// Compare targets.
const (
	CompareVersion CompareTarget = iota
	CompareCreate
	CompareMod
	CompareValue
	CompareLease
)

// Compare results.
const (
	CompareEqual CompareResult = iota
	CompareGreater
	CompareLess
	CompareNotEqual
)

// Compare is one condition of a Txn. With End set it must hold for every key
// in the range; a missing key compares as version, revisions and lease 0.
type Compare struct {
	Key, End []byte
	Target   CompareTarget
	Result   CompareResult
	Value    []byte
	Number   int64
}

// Op is exactly one of its fields.
type Op struct {
	Range  *RangeRequest
	Put    *PutRequest
	Delete *DeleteRequest
	Txn    *TxnRequest
}

// OpResult mirrors Op.
type OpResult struct {
	Range  *RangeResult
	Put    *PutResult
	Delete *DeleteResult
	Txn    *TxnResult
}

// TxnRequest runs Success if every compare holds and Failure otherwise, all at
// one revision.
type TxnRequest struct {
	Compare []Compare
	Success []Op
	Failure []Op
	// MaxResultBytes, if positive, bounds what the ranges of the txn and
	// of the txns nested in it read, all together (keys, values and about
	// 32 bytes a key): once they pass it the txn fails with
	// ErrResultTooLarge instead of reading on. A txn of many ranges over a
	// large store otherwise reads the store as many times, in memory.
	MaxResultBytes int64
}

// TxnResult is the answer to a TxnRequest. Revision is the store's revision
// after the txn (the txn's own revision if it wrote anything).
type TxnResult struct {
	Succeeded bool
	Results   []OpResult
	Revision  int64
}

// Lease is a granted lease.
type Lease struct {
	ID  int64
	TTL int64 // granted TTL in seconds
	// Remaining is the TTL left in seconds, rounded up.
	Remaining int64
	Keys      [][]byte
}

// Errors returned by the store; the gRPC layer maps them to etcd's errors.
var (
	ErrCompacted      = errors.New("sqlstore: required revision has been compacted")
	ErrFutureRevision = errors.New("sqlstore: required revision is a future revision")
	ErrLeaseNotFound  = errors.New("sqlstore: requested lease not found")
	ErrLeaseExists    = errors.New("sqlstore: lease already exists")
	ErrLeaseTTLTooBig = errors.New("sqlstore: too large lease TTL")
	ErrKeyNotFound    = errors.New("sqlstore: key not found")
	ErrDuplicateKey   = errors.New("sqlstore: duplicate key given in txn request")
	ErrKeyTooLong     = errors.New("sqlstore: key is too long")
	ErrEmptyKey       = errors.New("sqlstore: key is not provided")
	ErrClosed         = errors.New("sqlstore: store is closed")
	ErrResultTooLarge = errors.New("sqlstore: txn results are larger than allowed")
)

// MaxKeySize is the longest key every backend can index (MySQL's VARBINARY
// primary key bounds it).
const MaxKeySize = 2048

// MaxLeaseTTL matches etcd's limit.
const MaxLeaseTTL = 9_000_000_000

// IsWrite reports whether the op, or any op nested in it, can change data.
func (o Op) IsWrite() bool {
	switch {
	case o.Put != nil, o.Delete != nil:
		return true
	case o.Txn != nil:
		return o.Txn.IsWrite()
	}
	return false
}

// IsWrite reports whether any branch of the txn can change data.
func (t *TxnRequest) IsWrite() bool {
	for _, ops := range [][]Op{t.Success, t.Failure} {
		for _, o := range ops {
			if o.IsWrite() {
				return true
			}
		}
	}
	return false
}

// CompactedError is ErrCompacted with the revision history was compacted to.
type CompactedError struct{ CompactRevision int64 }

func (e *CompactedError) Error() string {
	return ErrCompacted.Error() + " (compact revision " + itoa(e.CompactRevision) + ")"
}

// Is makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }
