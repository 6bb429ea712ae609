package apiserver

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// LoadEncryptionConfig reads an EncryptionConfiguration file
// (apiserver.config.k8s.io/v1, the format of kube-apiserver's
// --encryption-provider-config: aescbc, aesgcm, secretbox, identity and KMS
// providers) into value transformers for Config.Transformers. For each
// resource the file names, the first provider encrypts new writes and every
// provider is tried on reads, so keys rotate by adding the new key first,
// restarting, rewriting the objects, then dropping the old key. Resources the
// file does not name are stored as they are. KMS plugins' goroutines live as
// long as ctx.
func LoadEncryptionConfig(ctx context.Context, path string) (value.ResourceTransformers, error) {
	cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "sqlkube")
	if err != nil {
		return nil, fmt.Errorf("apiserver: encryption provider config %s: %w", path, err)
	}
	return encryptionconfig.StaticTransformers(cfg.Transformers), nil
}
