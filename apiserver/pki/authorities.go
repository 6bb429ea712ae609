package pki

import "os"

// Authorities are the files that make a cluster's identity, the same on
// every server of the cluster: the three CAs (cluster, client,
// front-proxy) with their keys and the service-account key pair. Leaves
// (serving, admin, front-proxy client, kubelet client, etcd) are each
// server's own, issued from these.
func (f Files) Authorities() []string {
	return []string{
		f.CACert, f.CAKey,
		f.ClientCACert, f.ClientCAKey,
		f.FrontProxyCACert, f.FrontProxyCAKey,
		f.ServiceAccountKey, f.ServiceAccount,
	}
}

// EnsureAuthorities creates whatever of the authorities is missing under
// dir (and no leaf) and returns the files.
func EnsureAuthorities(dir string) (Files, error) {
	f := FilesIn(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	for _, ca := range []struct{ cert, key, name string }{
		{f.CACert, f.CAKey, "sqlkube-ca"},
		{f.ClientCACert, f.ClientCAKey, "sqlkube-client-ca"},
		{f.FrontProxyCACert, f.FrontProxyCAKey, "sqlkube-front-proxy-ca"},
	} {
		if _, _, err := ensureCA(ca.cert, ca.key, ca.name); err != nil {
			return f, err
		}
	}
	return f, ensureServiceAccountKey(f.ServiceAccountKey, f.ServiceAccount)
}
