package etcdshim

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// Status reports this instance as the leader of a one-member cluster; the
// raft index is the current revision. As etcd's, it reports the store's
// size (DbSize: what the quota counts; DbSizeInUse: the part holding data),
// its quota, and the active alarms in Errors ("memberID:N alarm:NOSPACE",
// which etcdctl endpoint status prints as ERRORS), with a line of its own
// while the disk under the store is full.
func (m *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	cur, _, err := m.s.be.Revisions(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	size, err := m.s.be.Size(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	inUse, err := m.s.be.SizeInUse(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	alarms, err := m.s.be.Alarms(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.StatusResponse{
		Header: m.s.header(cur), Version: Version, DbSize: size, DbSizeInUse: inUse, DbSizeQuota: m.s.be.QuotaBytes(),
		Leader: m.s.memberID, RaftIndex: uint64(cur), RaftTerm: 1, RaftAppliedIndex: uint64(cur),
		StorageVersion: "3.7.0",
	}
	for _, a := range alarms {
		resp.Errors = append(resp.Errors, alarmString(a))
	}
	if d, ok := m.s.be.(diskFuller); ok {
		if full, since := d.DiskFull(); full {
			resp.Errors = append(resp.Errors, "sqlkube: disk full since "+since.UTC().Format(time.RFC3339)+": writes that could grow the store are refused until there is space")
		}
	}
	return resp, nil
}

// diskFuller is a Backend that knows when the disk under it is full
// (sqlstore on SQLite).
type diskFuller interface {
	DiskFull() (full bool, since time.Time)
}

// alarmString is an alarm as etcd's Status lists it.
func alarmString(a sqlstore.Alarm) string {
	return fmt.Sprintf("memberID:%d alarm:%s", a.MemberID, pb.AlarmType(a.Type))
}

func (m *maintenanceServer) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := m.s.be.Defragment(ctx); err != nil {
		m.s.log.Warn().Err(err).Msg("defragmentation failed")
		return nil, toGRPC(err)
	}
	cur, _, _ := m.s.be.Revisions(ctx)
	return &pb.DefragmentResponse{Header: m.s.header(cur)}, nil
}

// Alarm lists, raises and clears alarms as etcd does: GET lists the active
// alarms of the given type (NONE: all), ACTIVATE raises one for the given
// member, DEACTIVATE clears it; the answer lists the alarm acted on (none
// when there was nothing to do). The store keeps alarms in its database,
// so they outlive a restart and every server on the database shares them.
// While a NOSPACE alarm is active, requests that could grow the store
// (Put, Txn with a put, LeaseGrant) fail with "etcdserver: mvcc: database
// space exceeded"; `etcdctl alarm disarm` clears it, and a store still
// over its quota raises it again at the next such request. Only NOSPACE
// can be raised: sqlkube has no CORRUPT alarm.
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp := &pb.AlarmResponse{}
	typ := sqlstore.AlarmType(r.Alarm)
	switch r.Action {
	case pb.AlarmRequest_GET:
		alarms, err := m.s.be.Alarms(ctx)
		if err != nil {
			return nil, toGRPC(err)
		}
		for _, a := range alarms {
			if typ == sqlstore.AlarmNone || a.Type == typ {
				resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: a.MemberID, Alarm: pb.AlarmType(a.Type)})
			}
		}
	case pb.AlarmRequest_ACTIVATE:
		if typ == sqlstore.AlarmNone {
			break
		}
		if typ != sqlstore.AlarmNoSpace {
			return nil, status.Errorf(codes.InvalidArgument, "etcdserver: sqlkube raises no %s alarm", r.Alarm)
		}
		a := sqlstore.Alarm{MemberID: r.MemberID, Type: typ}
		if err := m.s.be.ActivateAlarm(ctx, a); err != nil {
			return nil, toGRPC(err)
		}
		m.s.log.Warn().Str("alarm", alarmString(a)).Msg("alarm raised by a client")
		resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: a.MemberID, Alarm: r.Alarm})
	case pb.AlarmRequest_DEACTIVATE:
		a := sqlstore.Alarm{MemberID: r.MemberID, Type: typ}
		was, err := m.s.be.DeactivateAlarm(ctx, a)
		if err != nil {
			return nil, toGRPC(err)
		}
		if was {
			m.s.log.Info().Str("alarm", alarmString(a)).Msg("alarm cleared")
			resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: a.MemberID, Alarm: r.Alarm})
		}
	}
	cur, _, _ := m.s.be.Revisions(ctx)
	resp.Header = m.s.header(cur)
	return resp, nil
}

// raiseNoSpace raises this member's NOSPACE alarm when err says a request
// would have taken the store past its quota, as etcd's quota does before
// it answers "database space exceeded".
func (s *Server) raiseNoSpace(ctx context.Context, err error) {
	var qe *sqlstore.QuotaError
	if !errors.As(err, &qe) {
		return
	}
	// The alarm is raised whether or not the client still waits.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	a := sqlstore.Alarm{MemberID: s.memberID, Type: sqlstore.AlarmNoSpace}
	if aerr := s.be.ActivateAlarm(ctx, a); aerr != nil {
		s.log.Error().Err(aerr).Msg("raising the NOSPACE alarm failed")
		return
	}
	s.log.Warn().Int64("sizeBytes", qe.Size).Int64("quotaBytes", qe.Quota).Str("alarm", alarmString(a)).
		Msg("a request exceeded the space quota; NOSPACE alarm raised: writes that could grow the store are refused until compaction, defragmentation and etcdctl alarm disarm")
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
