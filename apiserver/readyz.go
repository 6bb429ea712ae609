package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// readyzStorageTimeout bounds the storage check of /readyz: a database
// that does not answer within it counts as unreachable.
const readyzStorageTimeout = 2 * time.Second

// ReadyzCheck is one line of /readyz.
type ReadyzCheck struct {
	// Name is the check's name: its line reads "[+]Name ok" or
	// "[-]Name failed: reason", and ?exclude=Name leaves it out.
	Name string
	// Check returns nil when healthy, else the reason it is not.
	Check func(ctx context.Context) error
}

// readyzChecks are kube-apiserver's shape of /readyz: ping, etcd (a read
// through the storage client, so a lost database connection makes the
// server unready until it is back), and the caches (watch caches,
// informers) every request relies on; then Config.ReadyzChecks.
func (s *Server) readyzChecks() []ReadyzCheck {
	return append([]ReadyzCheck{
		{"ping", func(context.Context) error { return nil }},
		{"etcd", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, readyzStorageTimeout)
			defer cancel()
			if _, err := s.cfg.Client.Client.Get(ctx, "/registry/health", clientv3.WithCountOnly()); err != nil {
				return fmt.Errorf("storage unreachable: %w", err)
			}
			return nil
		}},
		{"caches", func(context.Context) error {
			for _, ready := range s.ready {
				if !ready() {
					return errors.New("watch caches or informers not synced")
				}
			}
			return nil
		}},
	}, s.cfg.ReadyzChecks...)
}

// readyz answers 200 "ok" when every check passes; otherwise 503 with a
// [+]/[-] line per check (the failing ones with their reason) and
// "readyz check failed", as kube-apiserver. ?verbose lists the checks
// either way. ?exclude=NAME (repeatable) leaves a check out, as
// kube-apiserver's: "[+]NAME excluded: ok", and a warning line for names
// no check has.
func (s *Server) readyz(c echo.Context) error {
	var b strings.Builder
	failed := false
	excluded := map[string]bool{}
	for _, name := range c.QueryParams()["exclude"] {
		excluded[name] = true
	}
	for _, rc := range s.readyzChecks() {
		if excluded[rc.Name] {
			delete(excluded, rc.Name)
			fmt.Fprintf(&b, "[+]%s excluded: ok\n", rc.Name)
			continue
		}
		if err := rc.Check(c.Request().Context()); err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", rc.Name, err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", rc.Name)
		}
	}
	if len(excluded) > 0 {
		names := make([]string, 0, len(excluded))
		for name := range excluded {
			names = append(names, strconv.Quote(name))
		}
		slices.Sort(names)
		fmt.Fprintf(&b, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(names, ","))
	}
	if failed {
		b.WriteString("readyz check failed\n")
		return c.String(http.StatusServiceUnavailable, b.String())
	}
	if _, verbose := c.QueryParams()["verbose"]; verbose {
		b.WriteString("readyz check passed\n")
		return c.String(http.StatusOK, b.String())
	}
	return c.String(http.StatusOK, "ok")
}
