package etcdshim

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// Status reports this instance as the leader of a one-member cluster; the
// raft index is the current revision.
func (m *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	cur, _, err := m.s.be.Revisions(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	size, err := m.s.be.Size(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.StatusResponse{
		Header: m.s.header(cur), Version: Version, DbSize: size, DbSizeInUse: size,
		Leader: m.s.memberID, RaftIndex: uint64(cur), RaftTerm: 1, RaftAppliedIndex: uint64(cur),
		StorageVersion: "3.7.0",
	}, nil
}

func (m *maintenanceServer) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := m.s.be.Defragment(ctx); err != nil {
		return nil, toGRPC(err)
	}
	cur, _, _ := m.s.be.Revisions(ctx)
	return &pb.DefragmentResponse{Header: m.s.header(cur)}, nil
}

// Alarm has nothing to report: the database enforces its own limits.
func (m *maintenanceServer) Alarm(ctx context.Context, _ *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	cur, _, _ := m.s.be.Revisions(ctx)
	return &pb.AlarmResponse{Header: m.s.header(cur)}, nil
}

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func (c *clusterServer) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	cur, _, _ := c.s.be.Revisions(ctx)
	return &pb.MemberListResponse{
		Header: c.s.header(cur),
		Members: []*pb.Member{{
			ID: c.s.memberID, Name: c.s.opts.Name, ClientURLs: c.s.opts.ClientURLs, PeerURLs: c.s.opts.ClientURLs,
		}},
	}, nil
}
