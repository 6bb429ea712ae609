package datastore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// An etcd DSN is etcd://host:port[,host:port...], or etcds://… for TLS,
// with optional cacert, cert and key query parameters naming PEM files:
// etcds://10.0.0.1:2379?cacert=ca.crt&cert=client.crt&key=client.key.
func isEtcdDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "etcd://") || strings.HasPrefix(dsn, "etcds://")
}

func newEtcdClient(ctx context.Context, dsn string) (*clientv3.Client, string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("datastore: parse etcd DSN: %w", err)
	}
	q := u.Query()
	var tlsCfg *tls.Config
	scheme := "http://"
	if u.Scheme == "etcds" || q.Get("cacert") != "" || q.Get("cert") != "" {
		scheme = "https://"
		info := transport.TLSInfo{TrustedCAFile: q.Get("cacert"), CertFile: q.Get("cert"), KeyFile: q.Get("key")}
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("datastore: etcd TLS: %w", err)
		}
	}
	var eps []string
	for _, h := range strings.Split(u.Host, ",") {
		if h != "" {
			eps = append(eps, scheme+h)
		}
	}
	if len(eps) == 0 {
		return nil, "", fmt.Errorf("datastore: etcd DSN %q names no endpoint", dsn)
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: eps, TLS: tlsCfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		MaxCallSendMsgSize: 8 << 20, MaxCallRecvMsgSize: 64 << 20, Context: ctx,
	})
	if err != nil {
		return nil, "", fmt.Errorf("datastore: connect to etcd %s: %w", u.Host, err)
	}
	// Fail now, with the endpoint named, rather than at the first read.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Status(sctx, eps[0]); err != nil {
		c.Close()
		return nil, "", fmt.Errorf("datastore: etcd %s: %w", u.Host, err)
	}
	return c, u.Scheme + "://" + u.Host, nil
}

// allKeys is etcd's range over every key: from "\x00" to the end.
var allKeys = []clientv3.OpOption{clientv3.WithFromKey()}

const firstKey = "\x00"

// etcdSource reads every key of an etcd endpoint at one revision, and its
// leases with their remaining TTL.
type etcdSource struct {
	c    *clientv3.Client
	name string
	h    Header
}

var _ Source = (*etcdSource)(nil)

func openEtcdSource(ctx context.Context, dsn string) (*etcdSource, error) {
	c, name, err := newEtcdClient(ctx, dsn)
	if err != nil {
		return nil, err
	}
	resp, err := c.Get(ctx, firstKey, append(allKeys, clientv3.WithCountOnly())...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("datastore: etcd %s: count keys: %w", name, err)
	}
	return &etcdSource{c: c, name: name, h: Header{
		Revision: resp.Header.Revision, CompactRevision: resp.Header.Revision,
		Keys: resp.Count, Leases: -1, LogRows: 0, Kind: "etcd",
	}}, nil
}

func (s *etcdSource) Header() Header { return s.h }

func (s *etcdSource) Leases(ctx context.Context, fn func([]LeaseRow) error) error {
	resp, err := s.c.Leases(ctx)
	if err != nil {
		return fmt.Errorf("datastore: etcd leases: %w", err)
	}
	var out []LeaseRow
	for _, l := range resp.Leases {
		ttl, err := s.c.TimeToLive(ctx, l.ID)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("datastore: etcd lease %x: %w", l.ID, err)
		}
		if ttl.TTL <= 0 { // expired meanwhile
			continue
		}
		out = append(out, LeaseRow{ID: int64(l.ID), TTL: ttl.GrantedTTL, ExpiresAt: time.Now().UnixMilli() + ttl.TTL*1000})
		if len(out) == batchSize {
			if err := fn(out); err != nil {
				return err
			}
			out = out[:0]
		}
	}
	if len(out) > 0 {
		return fn(out)
	}
	return nil
}

func (s *etcdSource) Current(ctx context.Context, fn func([]KeyValue) error) error {
	key := firstKey
	for {
		resp, err := s.c.Get(ctx, key, clientv3.WithFromKey(), clientv3.WithRev(s.h.Revision),
			clientv3.WithLimit(batchSize), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return fmt.Errorf("datastore: etcd read at revision %d: %w", s.h.Revision, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		kvs := make([]KeyValue, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			kvs[i] = fromEtcd(kv)
		}
		if err := fn(kvs); err != nil {
			return err
		}
		if !resp.More {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func fromEtcd(kv *mvccpb.KeyValue) KeyValue {
	return KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

func (s *etcdSource) History(context.Context, func([]LogRow) error) error { return nil }
func (s *etcdSource) Describe() string                                    { return s.name }
func (s *etcdSource) Close() error                                        { return s.c.Close() }

// etcdSink writes keys and leases to an etcd endpoint. etcd assigns
// revisions itself, so the copy cannot keep them; Begin first advances the
// target's revision to the source's, so every key is then written above
// it: the store's revision and every object's resourceVersion end up
// higher than they were on the source.
type etcdSink struct {
	c    *clientv3.Client
	name string
	h    Header
	// granted holds the leases created on the target.
	granted map[int64]bool
	// progress, if set, hears how advancing the revision goes.
	progress io.Writer
}

func (s *etcdSink) setProgress(w io.Writer) { s.progress = w }

var _ Sink = (*etcdSink)(nil)

// etcdMaxTxnOps is etcd's default --max-txn-ops; etcdMaxTxnBytes keeps a
// txn under its default --max-request-bytes (1.5 MiB).
const (
	etcdMaxTxnOps   = 128
	etcdMaxTxnBytes = 1 << 20
)

func openEtcdSink(ctx context.Context, dsn string, force bool) (*etcdSink, error) {
	c, name, err := newEtcdClient(ctx, dsn)
	if err != nil {
		return nil, err
	}
	s := &etcdSink{c: c, name: name, granted: map[int64]bool{}}
	keys, err := c.Get(ctx, firstKey, append(allKeys, clientv3.WithCountOnly())...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("datastore: etcd %s: count keys: %w", name, err)
	}
	leases, err := c.Leases(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("datastore: etcd %s: list leases: %w", name, err)
	}
	if keys.Count == 0 && len(leases.Leases) == 0 {
		return s, nil
	}
	if !force {
		c.Close()
		return nil, fmt.Errorf("%w: etcd %s holds %d keys and %d leases", ErrNotEmpty, name, keys.Count, len(leases.Leases))
	}
	for _, l := range leases.Leases {
		if _, err := c.Revoke(ctx, l.ID); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			c.Close()
			return nil, fmt.Errorf("datastore: etcd %s: revoke lease %x: %w", name, l.ID, err)
		}
	}
	if _, err := c.Delete(ctx, firstKey, allKeys...); err != nil {
		c.Close()
		return nil, fmt.Errorf("datastore: etcd %s: empty it: %w", name, err)
	}
	return s, nil
}

func (s *etcdSink) Begin(ctx context.Context, h Header) error {
	s.h = h
	return s.advance(ctx, h.Revision)
}

// Leases grants each lease with its ID and, as its TTL, the time it had
// left (at least a second): etcd cannot hold a granted TTL apart from the
// remaining one, and expiring keys when the source would have matters
// more than the TTL keepalives renew to.
func (s *etcdSink) Leases(ctx context.Context, ls []LeaseRow) error {
	now := time.Now().UnixMilli()
	lc := pb.NewLeaseClient(s.c.ActiveConnection())
	for _, l := range ls {
		ttl := max((l.ExpiresAt-now+999)/1000, 1)
		if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: l.ID, TTL: ttl}); err != nil {
			return fmt.Errorf("datastore: etcd %s: grant lease %x: %w", s.name, l.ID, err)
		}
		s.granted[l.ID] = true
	}
	return nil
}

func (s *etcdSink) Current(ctx context.Context, kvs []KeyValue) error {
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := s.c.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("datastore: etcd %s: write keys: %w", s.name, err)
		}
		ops, size = ops[:0], 0
		return nil
	}
	for _, kv := range kvs {
		n := len(kv.Key) + len(kv.Value)
		if len(ops) == etcdMaxTxnOps || (len(ops) > 0 && size+n > etcdMaxTxnBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		var opts []clientv3.OpOption
		if kv.Lease != 0 && s.granted[kv.Lease] {
			opts = append(opts, clientv3.WithLease(clientv3.LeaseID(kv.Lease)))
		}
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value), opts...))
		size += n
	}
	return flush()
}

func (s *etcdSink) History(context.Context, []LogRow) error { return nil }

func (s *etcdSink) Commit(context.Context) error { return nil }

// padKey is where advance's throwaway writes go; it is deleted at the end.
const padKey = "/sqlkube.io/datastore-migrate/revision-pad"

// advance raises the target's revision to rev with writes to padKey (the
// last one deletes it). That costs one etcd write per missing revision,
// made by 16 writers at once.
func (s *etcdSink) advance(ctx context.Context, rev int64) error {
	resp, err := s.c.Get(ctx, padKey)
	if err != nil {
		return fmt.Errorf("datastore: etcd %s: read revision: %w", s.name, err)
	}
	missing := rev - resp.Header.Revision
	if missing <= 0 {
		return nil
	}
	// missing-1 puts, then the delete is the last revision.
	var left atomic.Int64
	left.Store(missing - 1)
	start := time.Now()
	if s.progress != nil {
		fmt.Fprintf(s.progress, "advancing etcd's revision from %d to %d (%d writes)\n", resp.Header.Revision, rev, missing)
		done, exited := make(chan struct{}), make(chan struct{})
		defer func() { close(done); <-exited }()
		go func() {
			defer close(exited)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					fmt.Fprintf(s.progress, "advancing etcd's revision: %d writes left (%s)\n", max(left.Load(), 0), time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := s.c.Put(ctx, padKey, ""); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("datastore: etcd %s: advance revision: %w", s.name, err)
	}
	if _, err := s.c.Delete(ctx, padKey); err != nil {
		return fmt.Errorf("datastore: etcd %s: advance revision: %w", s.name, err)
	}
	return nil
}

func (s *etcdSink) Describe() string { return s.name }
func (s *etcdSink) Close() error     { return s.c.Close() }
