package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/identity"
)

// TokenFileName is where a server keeps the cluster token in its data
// directory (0600): generated there by the first server, written there by
// a server that joined with --token, read from there on restart.
const TokenFileName = "token"

// ClusterToken is the token a server starts with: --token, else the
// content of --token-file, else DATA_DIR/token ("" when there is none).
func ClusterToken(f *Config) (string, error) {
	if f.Token != "" && f.TokenFile != "" {
		return "", errors.New("give --token or --token-file, not both")
	}
	path := f.TokenFile
	if f.Token != "" {
		return f.Token, nil
	}
	if path == "" {
		path = filepath.Join(f.DataDir, TokenFileName)
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && f.TokenFile == "":
		return "", nil
	case err != nil:
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%s is empty: it should hold the cluster token", path)
	}
	return token, nil
}

// EstablishIdentity gives the server the cluster's CAs, service-account
// key and encryption configuration from the datastore (kv), or stores its
// own there when it is the first (identity.Establish). Without a token the
// first server generates one into DATA_DIR/token; a server that finds
// another's identity and has no token stops, naming --token. A shared
// encryption configuration becomes f.Encryption when the server has none.
func EstablishIdentity(ctx context.Context, kv clientv3.KV, f *Config) error {
	log, out := f.Log, f.out()
	token, err := ClusterToken(f)
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(f.DataDir, TokenFileName)
	generated := false
	if token == "" {
		exists, err := identity.Exists(ctx, kv)
		if err != nil {
			return err
		}
		if exists {
			return errors.New("the datastore already holds a cluster identity made by another server: give that cluster's token with --token or --token-file (the first server wrote it to its DATA_DIR/token)")
		}
		if token, err = identity.NewToken(); err != nil {
			return err
		}
		generated = true
	}
	res, err := identity.Establish(ctx, kv, identity.Options{
		Dir: filepath.Join(f.DataDir, "tls"), Token: token, EncryptionConfig: f.Encryption, Logger: log,
		RandomToken: generated || f.RandomToken,
	})
	switch {
	case errors.Is(err, identity.ErrWrongToken) && generated:
		return errors.New("another server stored the cluster identity while this one started: give that cluster's token with --token or --token-file (the first server wrote it to its DATA_DIR/token)")
	case errors.Is(err, identity.ErrWrongToken):
		return errors.New("the cluster token (--token, --token-file or DATA_DIR/token) does not open the cluster identity stored in the datastore: give the token of the server that created the cluster (its DATA_DIR/token); no certificates were written")
	case err != nil:
		return err
	}
	if old, err := os.ReadFile(tokenPath); err != nil || strings.TrimSpace(string(old)) != token {
		if err := os.WriteFile(tokenPath, []byte(token+"\n"), 0o600); err != nil {
			return fmt.Errorf("write the cluster token: %w", err)
		}
	}
	f.Encryption = res.EncryptionConfig
	if res.Created {
		log.Info().Str("token", tokenPath).Msg("stored a new cluster identity in the datastore")
	} else {
		log.Info().Msg("joined the cluster identity stored in the datastore")
	}
	if generated {
		fmt.Fprintf(out, "Cluster token: %s (other servers on this datastore join with --token-file or --token)\n", tokenPath)
	}
	return nil
}

// EstablishIdentityLocal runs EstablishIdentity straight on a store,
// through an in-process etcd API of its own (`sqlkube server` needs the
// identity before it builds the etcd API it serves, whose certificates
// come from the cluster CA).
func EstablishIdentityLocal(ctx context.Context, be etcdshim.Backend, f *Config) error {
	srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: f.Log})
	defer srv.Stop(0)
	c := srv.LocalClient()
	defer c.Close()
	return EstablishIdentity(ctx, c.KV, f)
}
