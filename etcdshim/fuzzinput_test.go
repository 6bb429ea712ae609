package etcdshim_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// fuzzInput reads a fuzz input as a sequence of choices, each from one
// byte or a few. Once the bytes run out every choice reads as zero, so
// every input decodes, and a longer input means more requests, not
// different ones.
type fuzzInput struct {
	b []byte
	// revs gives the current and compacted revisions, for choosing
	// revisions near them.
	revs func() (current, compacted int64)
}

func (fs *fuzzServer) input(data []byte) *fuzzInput {
	return &fuzzInput{b: data, revs: fs.store.KnownRevisions}
}

func (in *fuzzInput) more() bool { return len(in.b) > 0 }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

// take returns the next n bytes, or fewer at the end.
func (in *fuzzInput) take(n int) []byte {
	n = min(n, len(in.b))
	out := in.b[:n:n]
	in.b = in.b[n:]
	return out
}

func (in *fuzzInput) flag() bool { return in.byte()&1 == 1 }

// chunk is up to 255 raw bytes, its length first.
func (in *fuzzInput) chunk() []byte { return in.take(int(in.byte())) }

// str is a chunk as a string field can carry it: protobuf strings are
// UTF-8, and the client refuses to send others.
func (in *fuzzInput) str() string { return strings.ToValidUTF8(string(in.chunk()), "\uFFFD") }

func (in *fuzzInput) int64() int64 {
	var b [8]byte
	copy(b[:], in.take(8))
	return int64(binary.BigEndian.Uint64(b[:]))
}

// number is an int64 at an edge (0, ±1, the extremes, 2^31, 2^32) or any.
func (in *fuzzInput) number() int64 {
	switch in.byte() % 10 {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return -1
	case 3:
		return math.MaxInt64
	case 4:
		return math.MinInt64
	case 5:
		return math.MaxInt32 + 1
	case 6:
		return math.MaxUint32 + 1
	case 7:
		return int64(in.byte())
	}
	return in.int64()
}

// revision is a revision near the current or compacted one, or a number.
func (in *fuzzInput) revision() int64 {
	cur, compacted := in.revs()
	switch in.byte() % 10 {
	case 0:
		return 0
	case 1:
		return cur
	case 2:
		return cur + 1
	case 3:
		return cur - 1
	case 4:
		return compacted
	case 5:
		return compacted + 1
	case 6:
		return 1
	case 7:
		return cur + 1000
	}
	return in.number()
}

// fuzzKeys are the keys inputs mostly use, so that their requests meet.
var fuzzKeys = [][]byte{[]byte("a"), []byte("b"), []byte("k/1"), []byte("k/2"), []byte("k/"), {0}, {0xff, 0xff}, nil}

// key is one of fuzzKeys, "k/" and a byte, raw bytes, or a key at, past
// and far past sqlkube's limit.
func (in *fuzzInput) key() []byte {
	c := in.byte()
	switch c % 16 {
	case 8, 9, 10, 11:
		return []byte{'k', '/', in.byte()}
	case 12:
		return in.chunk()
	case 13:
		return bytes.Repeat([]byte{'x'}, sqlstore.MaxKeySize)
	case 14:
		return bytes.Repeat([]byte{'x'}, sqlstore.MaxKeySize+1)
	case 15:
		return bytes.Repeat([]byte{'y'}, 64<<10)
	}
	return fuzzKeys[int(c%16)%len(fuzzKeys)]
}

// rangeEnd is a range end for key: none, "\x00" (every key from key), the
// end of key as a prefix, key itself (an empty range), just past key, raw
// bytes or "\xff".
func (in *fuzzInput) rangeEnd(key []byte) []byte {
	switch in.byte() % 7 {
	case 1:
		return []byte{0}
	case 2:
		return prefixEnd(key)
	case 3:
		return key
	case 4:
		return append(append([]byte(nil), key...), 0)
	case 5:
		return in.chunk()
	case 6:
		return []byte{0xff}
	}
	return nil
}

// prefixEnd is the range end that covers every key with prefix p, as
// clientv3.GetPrefixRangeEnd.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// Large values, shared by every input (requests only read them).
var (
	valueMiB      = bytes.Repeat([]byte{'v'}, 1<<20)
	valueTooLarge = bytes.Repeat([]byte{'V'}, etcdshim.MaxRequestBytes)
)

// value is no value, an empty or short one, raw bytes, 1 MiB, or one
// over etcd's request limit.
func (in *fuzzInput) value() []byte {
	switch in.byte() % 6 {
	case 1:
		return []byte("v")
	case 2:
		return in.chunk()
	case 3:
		return valueMiB
	case 4:
		return valueTooLarge
	case 5:
		return []byte{}
	}
	return nil
}

// enum is a value of an enum with n values, or one outside it.
func (in *fuzzInput) enum(n int32) int32 {
	c := in.byte()
	switch {
	case c < 0xf0:
		return int32(c) % n
	case c < 0xf8:
		return -1 - int32(c&7)
	}
	return n + int32(c&7)
}

// merge merges raw protobuf bytes from the input over m, so that any field
// can take any value; a malformed chunk leaves what it decoded before the
// fault.
func (in *fuzzInput) merge(m proto.Message) {
	if raw := in.chunk(); len(raw) > 0 {
		_ = proto.UnmarshalOptions{Merge: true}.Unmarshal(raw, m)
	}
}
