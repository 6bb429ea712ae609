package sqlstore

import (
	"bytes"
	"sort"
)

// delSet is the key ranges a txn branch deletes, merged into disjoint
// intervals sorted by start, so that whether a put falls in one is a
// binary search. A txn of tens of thousands of nested puts and deletes
// (etcd's limits allow them in one request) is then checked in n log n
// time rather than n², which took seconds of CPU per request.
type delSet struct {
	ivs []interval
}

// interval is the keys from start up to end (exclusive), or every key from
// start when noEnd.
type interval struct {
	start, end []byte
	noEnd      bool
}

// toInterval is r as an interval; false if r holds no key.
func toInterval(r keyRange) (interval, bool) {
	switch {
	case r.single():
		// The keys from r.start below its successor: r.start alone.
		return interval{start: r.start, end: append(append([]byte(nil), r.start...), 0)}, true
	case r.noEnd:
		return interval{start: r.start, noEnd: true}, true
	case r.empty():
		return interval{}, false
	}
	return interval{start: r.start, end: r.end}, true
}

// add merges ranges into the set.
func (s *delSet) add(ranges []keyRange) {
	add := make([]interval, 0, len(ranges))
	for _, r := range ranges {
		if iv, ok := toInterval(r); ok {
			add = append(add, iv)
		}
	}
	if len(add) == 0 {
		return
	}
	sort.Slice(add, func(i, j int) bool { return bytes.Compare(add[i].start, add[j].start) < 0 })
	merged := make([]interval, 0, len(s.ivs)+len(add))
	push := func(iv interval) {
		n := len(merged)
		if n == 0 {
			merged = append(merged, iv)
			return
		}
		last := &merged[n-1]
		if !last.noEnd && bytes.Compare(iv.start, last.end) > 0 {
			merged = append(merged, iv) // disjoint, with a gap
			return
		}
		switch {
		case last.noEnd:
		case iv.noEnd:
			last.noEnd, last.end = true, nil
		case bytes.Compare(iv.end, last.end) > 0:
			last.end = iv.end
		}
	}
	i, j := 0, 0
	for i < len(s.ivs) || j < len(add) {
		if j == len(add) || (i < len(s.ivs) && bytes.Compare(s.ivs[i].start, add[j].start) <= 0) {
			push(s.ivs[i])
			i++
		} else {
			push(add[j])
			j++
		}
	}
	s.ivs = merged
}

// contains reports whether key is in a range of the set.
func (s *delSet) contains(key []byte) bool {
	// The last interval that starts at or before key.
	i := sort.Search(len(s.ivs), func(i int) bool { return bytes.Compare(s.ivs[i].start, key) > 0 }) - 1
	if i < 0 {
		return false
	}
	return s.ivs[i].noEnd || bytes.Compare(key, s.ivs[i].end) < 0
}
