package etcdshim

import (
	"context"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// firstStreamChunk is how many keys the first chunk of a RangeStream reads;
// later chunks double or halve it to stay near MaxRequestBytes each. etcd
// starts at 10, each of its chunks being a cheap in-memory read; a chunk
// here is a SQL statement, so it starts a little larger.
const firstStreamChunk = 100

// RangeStream serves etcd 3.7's streaming range (kube-apiserver 1.37 lists
// with it while its EtcdRangeStream gate is on): the range is read in
// chunks, all at the revision current when it starts (or the one asked
// for), and sent as consecutive partial responses. Each carries a disjoint
// run of keys; the last also carries the header, More and Count, so merging
// them gives what Range answers. As etcd, it refuses sort orders other than
// by key ascending and revision filters (Unimplemented).
func (k *kvServer) RangeStream(r *pb.RangeRequest, srv grpc.ServerStreamingServer[pb.RangeStreamResponse]) error {
	if err := checkSize(r); err != nil {
		return err
	}
	if err := checkRange(r); err != nil {
		return err
	}
	ascending := r.SortOrder == pb.RangeRequest_NONE || (r.SortOrder == pb.RangeRequest_ASCEND && r.SortTarget == pb.RangeRequest_KEY)
	if !ascending {
		return status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		return status.Error(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	ctx := srv.Context()
	req := proto.Clone(r).(*pb.RangeRequest)
	req.SortOrder, req.SortTarget = pb.RangeRequest_NONE, pb.RangeRequest_KEY
	if req.CountOnly {
		res, err := k.s.be.Range(ctx, fromRange(req))
		if err != nil {
			return toGRPC(err)
		}
		return srv.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Header: k.s.header(res.Revision), Count: res.Count}})
	}
	total := req.Limit // 0: all of it
	chunk := int64(firstStreamChunk)
	var sent, headerRev int64
	for {
		req.Limit = chunk
		if total > 0 && total-sent < chunk {
			req.Limit = total - sent
		}
		res, err := k.s.be.Range(ctx, fromRange(req))
		if err != nil {
			return toGRPC(err)
		}
		if headerRev == 0 {
			// Every chunk reads at the revision the stream started at;
			// the final header names it (or, for a range asked at a past
			// revision, the revision current when it started, as Range).
			headerRev = res.Revision
			if req.Revision == 0 {
				req.Revision = res.Revision
			}
		}
		sent += int64(len(res.KVs))
		out := &pb.RangeResponse{Kvs: toKVs(res.KVs)}
		done := !res.More || (total > 0 && sent >= total)
		var next []byte
		if res.More && len(res.KVs) > 0 {
			next = append(append([]byte(nil), res.KVs[len(res.KVs)-1].Key...), 0)
		}
		if done {
			out.Header, out.More, out.Count = k.s.header(headerRev), res.More, sent
			if res.More {
				rest := fromRange(req)
				rest.Key, rest.Limit, rest.CountOnly = next, 0, true
				left, err := k.s.be.Range(ctx, rest)
				if err != nil {
					return toGRPC(err)
				}
				out.Count += left.Count
			}
		}
		if err := srv.Send(&pb.RangeStreamResponse{RangeResponse: out}); err != nil {
			return err
		}
		if done {
			return nil
		}
		switch size := proto.Size(out); {
		case size < MaxRequestBytes/2:
			chunk *= 2
		case size > MaxRequestBytes*2 && chunk > 1:
			chunk /= 2
		}
		req.Key = next
	}
}

// localKV is the in-process KV client: etcd's adapter for every call but
// RangeStream, which its adapter does not carry (it answers Unimplemented);
// that one runs the server's RangeStream into a channel.
type localKV struct {
	pb.KVClient
	s *kvServer
}

func (c localKV) RangeStream(ctx context.Context, in *pb.RangeRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &rangePipe{ctx: ctx, ch: make(chan *pb.RangeStreamResponse, 1), done: make(chan struct{})}
	go func() {
		p.err = c.s.RangeStream(in, p)
		close(p.done)
		cancel()
	}()
	return p, nil
}

// rangePipe carries one in-process RangeStream: the server side sends into
// ch, the client side receives from it, then io.EOF or the server's error.
type rangePipe struct {
	ctx  context.Context
	ch   chan *pb.RangeStreamResponse
	done chan struct{}
	err  error
}

func (p *rangePipe) Send(m *pb.RangeStreamResponse) error {
	select {
	case p.ch <- m:
		return nil
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

func (p *rangePipe) Recv() (*pb.RangeStreamResponse, error) {
	select {
	case m := <-p.ch:
		return m, nil
	case <-p.done:
		// A response sent just before the end may still be waiting.
		select {
		case m := <-p.ch:
			return m, nil
		default:
		}
		if p.err != nil {
			return nil, p.err
		}
		return nil, io.EOF
	}
}

func (p *rangePipe) Context() context.Context { return p.ctx }

// The rest of grpc.ServerStream and grpc.ClientStream: an in-process call
// has no metadata and no raw messages.
func (p *rangePipe) SetHeader(metadata.MD) error  { return nil }
func (p *rangePipe) SendHeader(metadata.MD) error { return nil }
func (p *rangePipe) SetTrailer(metadata.MD)       {}
func (p *rangePipe) Header() (metadata.MD, error) { return nil, nil }
func (p *rangePipe) Trailer() metadata.MD         { return nil }
func (p *rangePipe) CloseSend() error             { return nil }
func (p *rangePipe) SendMsg(any) error {
	return status.Error(codes.Internal, "etcdshim: no raw messages in process")
}
func (p *rangePipe) RecvMsg(any) error {
	return status.Error(codes.Internal, "etcdshim: no raw messages in process")
}
