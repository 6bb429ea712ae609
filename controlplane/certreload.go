package controlplane

import (
	"crypto/tls"
	"os"
	"sync"
	"time"
)

// reloadingCert serves a key pair from files and loads them again when the
// certificate file changes (as `sqlkube certs rotate` does), so a renewed
// certificate is served without a restart. A pair that fails to load
// (say, read between the key's and the certificate's writes) leaves the
// previous one in use until the next handshake tries again.
type reloadingCert struct {
	certFile, keyFile string
	mu                sync.Mutex // guards the fields below
	cert              *tls.Certificate
	modTime           time.Time
}

func newReloadingCert(certFile, keyFile string) (*reloadingCert, error) {
	r := &reloadingCert{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *reloadingCert) load() error {
	st, err := os.Stat(r.certFile)
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cert, r.modTime = &pair, st.ModTime()
	return nil
}

// GetCertificate is for tls.Config.GetCertificate.
func (r *reloadingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if st, err := os.Stat(r.certFile); err == nil {
		r.mu.Lock()
		changed := !st.ModTime().Equal(r.modTime)
		r.mu.Unlock()
		if changed {
			_ = r.load()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}
