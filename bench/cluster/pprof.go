package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

// freeLoopbackAddress is a loopback TCP address no one listens on now
// (the OS picks the port; another process may still take it before the
// server does, which then fails to start and says so).
func freeLoopbackAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// CPUProfile fetches a CPU profile of the server over the next seconds
// from its pprof address into path; the channel receives the result.
func (s *Server) CPUProfile(ctx context.Context, path string, seconds int) <-chan error {
	done := make(chan error, 1)
	if s.PprofAddress == "" {
		done <- errors.New("cluster: the server serves no pprof (no --pprof-address)")
		return done
	}
	go func() {
		done <- fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.PprofAddress, seconds), path)
	}()
	return done
}

func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cluster: CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("cluster: CPU profile: %s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
