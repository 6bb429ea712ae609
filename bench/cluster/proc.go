package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// CPUTime is the user plus system CPU time a process has used, from
// /proc/PID/stat.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it start
	// at state (3). utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("cluster: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("cluster: /proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// RSS is a process's resident set size in bytes, from /proc/PID/status.
func RSS(pid int) (int64, error) {
	return statusBytes(pid, "VmRSS")
}

// RSSParts splits a process's resident set into its anonymous pages (the
// heap, stacks) and its file pages (the mapped binary, libraries and
// files), from /proc/PID/status.
func RSSParts(pid int) (anon, file int64, err error) {
	if anon, err = statusBytes(pid, "RssAnon"); err != nil {
		return 0, 0, err
	}
	file, err = statusBytes(pid, "RssFile")
	return anon, file, err
}

// statusBytes reads one "Name: N kB" field of /proc/PID/status.
func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("cluster: /proc/%d/status: no %s", pid, field)
}
