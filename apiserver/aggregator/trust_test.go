package aggregator

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
)

type enqueued chan struct{}

func (e enqueued) Enqueue() {
	select {
	case e <- struct{}{}:
	default:
	}
}

// TestReloadEvery: a CA file rewritten (a renewal) reaches the content
// and its listeners at the next reload, with no file watch.
func TestReloadEvery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	write := func(host string) []byte {
		t.Helper()
		cert, _, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, cert, 0o600); err != nil {
			t.Fatal(err)
		}
		return cert
	}
	write("first")
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("test", path)
	if err != nil {
		t.Fatal(err)
	}
	told := make(enqueued, 1)
	ca.AddListener(told)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); reloadEvery(ctx, ca, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	second := write("second")
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return bytes.Equal(ca.CurrentCABundleContent(), second), nil
	})
	if err != nil {
		t.Fatal("the rewritten CA file was not read again")
	}
	select {
	case <-told:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener was not told of the new CA")
	}
}
