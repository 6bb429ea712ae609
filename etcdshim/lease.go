package etcdshim

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *Server
}

func (l *leaseServer) currentHeader(ctx context.Context) *pb.ResponseHeader {
	cur, _, _ := l.s.be.Revisions(ctx)
	return l.s.header(cur)
}

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	lease, err := l.s.be.LeaseGrant(ctx, r.ID, r.TTL)
	if err != nil {
		l.s.raiseNoSpace(ctx, err)
		return nil, toGRPC(err)
	}
	return &pb.LeaseGrantResponse{Header: l.currentHeader(ctx), ID: lease.ID, TTL: lease.TTL}, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	rev, err := l.s.be.LeaseRevoke(ctx, r.ID)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseRevokeResponse{Header: l.s.header(rev)}, nil
}

// LeaseKeepAlive renews leases as the client asks, until the client closes
// the stream or the server stops.
func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	reqs := make(chan *pb.LeaseKeepAliveRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var req *pb.LeaseKeepAliveRequest
		select {
		case req = <-reqs:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-l.s.stopping.Done():
			return rpctypes.ErrGRPCStopped
		}
		ttl, err := l.s.be.LeaseKeepAlive(ctx, req.ID)
		if errors.Is(err, sqlstore.ErrLeaseNotFound) {
			ttl, err = 0, nil // etcd answers TTL 0 for a lease that is gone
		}
		if err != nil {
			return toGRPC(err)
		}
		// The revision this member knows, as an etcd follower's header
		// names: keepalives are periodic, and a query each for a header
		// no client reads would be most of what an idle cluster costs.
		cur, _ := l.s.be.KnownRevisions()
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: l.s.header(cur), ID: req.ID, TTL: ttl}); err != nil {
			return err
		}
	}
}

func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	lease, err := l.s.be.LeaseTimeToLive(ctx, r.ID, r.Keys)
	if errors.Is(err, sqlstore.ErrLeaseNotFound) {
		return &pb.LeaseTimeToLiveResponse{Header: l.currentHeader(ctx), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseTimeToLiveResponse{Header: l.currentHeader(ctx), ID: lease.ID, TTL: lease.Remaining, GrantedTTL: lease.TTL, Keys: lease.Keys}, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	ids, err := l.s.be.Leases(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.LeaseLeasesResponse{Header: l.currentHeader(ctx)}
	for _, id := range ids {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	return resp, nil
}
