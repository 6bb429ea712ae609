// Package identity makes the servers on one datastore one cluster: the
// cluster CA, client CA, front-proxy CA, the service-account key pair and
// the encryption configuration are created once, by the first server, and
// stored in the datastore under Key, sealed with a key derived from the
// cluster token (as k3s keeps its bootstrap data). Every later server
// opens them with the same token and writes them into its own PKI
// directory, then issues its own leaf certificates from them, so a
// client certificate or service-account token from any server is good on
// every server.
//
// The value goes through the etcd v3 API the server already stores in, so
// it lives wherever the cluster does (SQLite, PostgreSQL, MySQL, an etcd
// endpoint) and moves with `sqlkube datastore migrate`.
package identity

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlkube/sqlkube/apiserver/pki"
)

// Key is where the sealed identity is stored. It is outside /registry/,
// so the API server never sees it.
const Key = "/sqlkube/identity"

// EncryptionConfigFile is the name, in the PKI directory, of the
// encryption configuration a server took from the shared identity.
const EncryptionConfigFile = "encryption-config.yaml"

// encryptionConfigEntry names the encryption configuration in a bundle.
const encryptionConfigEntry = "encryption-config"

var (
	// ErrWrongToken: the stored identity does not open with the token
	// given (another cluster's token, or a mistyped one).
	ErrWrongToken = errors.New("identity: the token does not open this datastore's cluster identity")
	// ErrNoToken: a token is needed and none was given.
	ErrNoToken = errors.New("identity: no cluster token")
)

// Options say where a server keeps its PKI and how it proves it belongs.
type Options struct {
	// Dir is the server's PKI directory (DATA_DIR/tls).
	Dir string
	// Token is the cluster token; it must not be empty.
	Token string
	// EncryptionConfig is the server's --encryption-provider-config file
	// ("" for none). The first server stores its content; a later server
	// without one uses the stored one.
	EncryptionConfig string
	// RandomToken says Token is NewToken's (256 random bits), which the
	// identity is sealed with a light key derivation for.
	RandomToken bool
	Logger      zerolog.Logger
}

// Result says what Establish did.
type Result struct {
	// Created is true when this server stored the identity (it was the
	// first), false when it took an existing one.
	Created bool
	// EncryptionConfig is the encryption configuration file the server
	// should load ("" for none): its own, or the shared one written
	// into Dir.
	EncryptionConfig string
}

// bundle is the plaintext of the sealed value: file contents by name.
type bundle struct {
	Files map[string][]byte `json:"files"`
}

// Exists reports whether the datastore already holds an identity.
func Exists(ctx context.Context, kv clientv3.KV) (bool, error) {
	resp, err := kv.Get(ctx, Key, clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("identity: read %s: %w", Key, err)
	}
	return resp.Count > 0, nil
}

// Establish makes o.Dir hold the cluster's authorities. If the datastore
// has an identity it is opened with o.Token (ErrWrongToken, and nothing
// written, when that fails) and its files replace whatever authorities
// o.Dir had. Otherwise the authorities in o.Dir (made now if missing) are
// sealed and stored, unless another server stored its own first, in which
// case that one is taken as above: there is never a second identity.
func Establish(ctx context.Context, kv clientv3.KV, o Options) (Result, error) {
	if o.Token == "" {
		return Result{}, ErrNoToken
	}
	resp, err := kv.Get(ctx, Key)
	if err != nil {
		return Result{}, fmt.Errorf("identity: read %s: %w", Key, err)
	}
	if len(resp.Kvs) > 0 {
		return take(resp.Kvs[0].Value, o)
	}
	files, err := pki.EnsureAuthorities(o.Dir)
	if err != nil {
		return Result{}, fmt.Errorf("identity: certificates: %w", err)
	}
	b := bundle{Files: map[string][]byte{}}
	for _, p := range files.Authorities() {
		data, err := os.ReadFile(p)
		if err != nil {
			return Result{}, fmt.Errorf("identity: %w", err)
		}
		b.Files[filepath.Base(p)] = data
	}
	if o.EncryptionConfig != "" {
		data, err := os.ReadFile(o.EncryptionConfig)
		if err != nil {
			return Result{}, fmt.Errorf("identity: --encryption-provider-config: %w", err)
		}
		b.Files[encryptionConfigEntry] = data
	}
	plain, err := json.Marshal(b)
	if err != nil {
		return Result{}, err
	}
	sealed, err := seal(o.Token, plain, []byte(Key), o.RandomToken)
	if err != nil {
		return Result{}, fmt.Errorf("identity: seal: %w", err)
	}
	txn, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(Key), "=", 0)).
		Then(clientv3.OpPut(Key, string(sealed))).
		Else(clientv3.OpGet(Key)).
		Commit()
	if err != nil {
		return Result{}, fmt.Errorf("identity: store %s: %w", Key, err)
	}
	if txn.Succeeded {
		return Result{Created: true, EncryptionConfig: o.EncryptionConfig}, nil
	}
	// Another server stored its identity between our read and write.
	got := txn.Responses[0].GetResponseRange().GetKvs()
	if len(got) == 0 {
		return Result{}, fmt.Errorf("identity: %s was written and deleted while this server started; start it again", Key)
	}
	return take(got[0].Value, o)
}

// take opens a stored identity and writes its files into o.Dir.
func take(sealed []byte, o Options) (Result, error) {
	plain, err := open(o.Token, sealed, []byte(Key))
	if err != nil {
		return Result{}, err
	}
	var b bundle
	if err := json.Unmarshal(plain, &b); err != nil {
		return Result{}, fmt.Errorf("identity: stored bundle: %w", err)
	}
	files := pki.FilesIn(o.Dir)
	for _, p := range files.Authorities() {
		if len(b.Files[filepath.Base(p)]) == 0 {
			return Result{}, fmt.Errorf("identity: the stored identity lacks %s", filepath.Base(p))
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return Result{}, err
	}
	replaced := false
	for _, p := range files.Authorities() {
		want := b.Files[filepath.Base(p)]
		have, err := os.ReadFile(p)
		if err == nil && bytes.Equal(have, want) {
			continue
		}
		replaced = replaced || err == nil
		if err := writeAtomic(p, want, fileMode(p)); err != nil {
			return Result{}, fmt.Errorf("identity: %w", err)
		}
	}
	if replaced {
		o.Logger.Warn().Str("dir", o.Dir).Msg("this data directory's own CAs and service-account key were replaced by the cluster's (from the datastore); its certificates are reissued from them")
	}
	res := Result{EncryptionConfig: o.EncryptionConfig}
	if shared, ok := b.Files[encryptionConfigEntry]; ok {
		if o.EncryptionConfig == "" {
			res.EncryptionConfig = filepath.Join(o.Dir, EncryptionConfigFile)
			if err := writeAtomic(res.EncryptionConfig, shared, 0o600); err != nil {
				return Result{}, fmt.Errorf("identity: %w", err)
			}
		} else if own, err := os.ReadFile(o.EncryptionConfig); err == nil && !bytes.Equal(own, shared) {
			o.Logger.Warn().Str("file", o.EncryptionConfig).Msg("--encryption-provider-config differs from the cluster's stored one; this server uses its own (every server must be able to read what the others write)")
		}
	}
	return res, nil
}

// fileMode is 0600 for keys and 0644 for certificates and public keys,
// as the pki package writes them.
func fileMode(path string) os.FileMode {
	if ext := filepath.Ext(path); ext == ".crt" || ext == ".pub" {
		return 0o644
	}
	return 0o600
}

// writeAtomic replaces path with data (mode perm) through a temporary
// file in the same directory.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// NewToken makes a random cluster token (32 bytes, hex).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
