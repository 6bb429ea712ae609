package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AlarmType is the kind of an alarm, numbered as etcd's AlarmType.
type AlarmType int32

// Alarm types.
const (
	// AlarmNone matches every type where a type filters.
	AlarmNone AlarmType = 0
	// AlarmNoSpace is raised when a write would take the store past its
	// quota (Options.QuotaBytes). While one is active, requests that can
	// grow the store fail with ErrNoSpace.
	AlarmNoSpace AlarmType = 1
	// AlarmCorrupt is etcd's data corruption alarm; the store never
	// raises it.
	AlarmCorrupt AlarmType = 2
)

// Alarm is one active alarm: its kind and the member (an etcd member ID)
// that raised it. Alarms are kept in the database, so they survive a
// restart and every instance on the database sees them.
type Alarm struct {
	MemberID uint64
	Type     AlarmType
}

// An alarm is a row of kv_meta named alarmPrefix + "<type>/<member ID>"
// (both decimal), whose val is the type. Rows in the existing meta table
// need no migration, and a binary that knows nothing of alarms ignores
// them.
const alarmPrefix = "alarm/"

func (a Alarm) metaName() string {
	return alarmPrefix + strconv.Itoa(int(a.Type)) + "/" + strconv.FormatUint(a.MemberID, 10)
}

func parseAlarm(name string) (Alarm, bool) {
	typ, member, ok := strings.Cut(strings.TrimPrefix(name, alarmPrefix), "/")
	if !ok {
		return Alarm{}, false
	}
	t, err1 := strconv.ParseInt(typ, 10, 32)
	m, err2 := strconv.ParseUint(member, 10, 64)
	if err1 != nil || err2 != nil {
		return Alarm{}, false
	}
	return Alarm{MemberID: m, Type: AlarmType(t)}, true
}

// Alarms reads the active alarms from the database, ordered by member and
// type.
func (s *Store) Alarms(ctx context.Context) ([]Alarm, error) {
	s.quota.mu.Lock()
	gen := s.quota.alarmGen
	s.quota.mu.Unlock()
	rows, err := s.c.read.QueryContext(ctx, s.q(`SELECT name FROM kv_meta WHERE name LIKE ?`), alarmPrefix+"%")
	if err != nil {
		return nil, fmt.Errorf("sqlstore: read alarms: %w", err)
	}
	defer rows.Close()
	var alarms []Alarm
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("sqlstore: read alarms: %w", err)
		}
		if a, ok := parseAlarm(name); ok {
			alarms = append(alarms, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: read alarms: %w", err)
	}
	slices.SortFunc(alarms, func(a, b Alarm) int {
		if a.MemberID != b.MemberID {
			return cmpUint(a.MemberID, b.MemberID)
		}
		return int(a.Type - b.Type)
	})
	s.quota.mu.Lock()
	// An alarm this process raised or cleared while the rows were read
	// is newer than what they say.
	if s.quota.alarmGen == gen {
		s.quota.alarms = alarms
	}
	s.quota.alarmsAt = time.Now()
	s.quota.mu.Unlock()
	return slices.Clone(alarms), nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ActivateAlarm raises alarm a. Raising an active alarm again does
// nothing (and, when this process knows it is active, asks nothing of the
// database).
func (s *Store) ActivateAlarm(ctx context.Context, a Alarm) error {
	if a.Type == AlarmNone {
		return fmt.Errorf("sqlstore: activate alarm: no alarm type")
	}
	s.quota.mu.Lock()
	known := slices.Contains(s.quota.alarms, a)
	s.quota.mu.Unlock()
	if known {
		return nil
	}
	name := a.metaName()
	if _, err := s.c.write.ExecContext(ctx, s.q(`INSERT INTO kv_meta (name, val) VALUES (?, ?)`), name, int64(a.Type)); err != nil {
		// Another instance may have raised the same alarm first.
		var n int64
		if qerr := s.c.read.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM kv_meta WHERE name = ?`), name).Scan(&n); qerr != nil || n == 0 {
			return fmt.Errorf("sqlstore: activate alarm: %w", err)
		}
	}
	s.quota.mu.Lock()
	if !slices.Contains(s.quota.alarms, a) {
		s.quota.alarms = append(slices.Clone(s.quota.alarms), a)
	}
	s.quota.alarmGen++
	s.quota.mu.Unlock()
	if s.opts.OnAlarm != nil {
		s.opts.OnAlarm(a)
	}
	return nil
}

// DeactivateAlarm clears alarm a and reports whether it was active.
func (s *Store) DeactivateAlarm(ctx context.Context, a Alarm) (bool, error) {
	res, err := s.c.write.ExecContext(ctx, s.q(`DELETE FROM kv_meta WHERE name = ?`), a.metaName())
	if err != nil {
		return false, fmt.Errorf("sqlstore: deactivate alarm: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlstore: deactivate alarm: %w", err)
	}
	s.quota.mu.Lock()
	s.quota.alarms = slices.DeleteFunc(slices.Clone(s.quota.alarms), func(b Alarm) bool { return b == a })
	s.quota.alarmGen++
	s.quota.mu.Unlock()
	return n > 0, nil
}

func hasNoSpace(alarms []Alarm) bool {
	return slices.ContainsFunc(alarms, func(a Alarm) bool { return a.Type == AlarmNoSpace })
}
