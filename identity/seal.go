package identity

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/crypto/argon2"
)

// The key that seals the identity is derived from the cluster token with
// Argon2id (RFC 9106) over a random salt stored beside the ciphertext;
// the parameters travel in the envelope, so later versions may raise
// them and still open what older ones wrote.
const (
	kdfArgon2id    = "argon2id"
	argonTime      = 1
	argonMemoryKiB = 64 * 1024
	argonThreads   = 4
	// A token of NewToken's (256 random bits) needs no memory-hard
	// derivation: guessing it is out of reach whatever the cost per
	// guess, so such tokens get a light one (a host creating many
	// tenants would otherwise spend 64 MiB and a quarter of a CPU second
	// on each).
	lightMemoryKiB = 256
	lightThreads   = 1
	keyLen         = 32 // AES-256
	saltLen        = 16
	envelopeV1     = 1
)

// envelope is the stored form: JSON, byte fields in base64.
type envelope struct {
	Version int    `json:"version"`
	KDF     string `json:"kdf"`
	Time    uint32 `json:"time"`
	Memory  uint32 `json:"memoryKiB"`
	Threads uint8  `json:"threads"`
	Salt    []byte `json:"salt"`
	Nonce   []byte `json:"nonce"`
	Data    []byte `json:"data"`
}

// seal encrypts plain with a key derived from token (AES-256-GCM, the
// storage key as additional data so a value moved to another key does
// not open).
func seal(token string, plain, aad []byte, random bool) ([]byte, error) {
	e := envelope{Version: envelopeV1, KDF: kdfArgon2id, Time: argonTime, Memory: argonMemoryKiB, Threads: argonThreads,
		Salt: make([]byte, saltLen)}
	if random {
		e.Memory, e.Threads = lightMemoryKiB, lightThreads
	}
	if _, err := rand.Read(e.Salt); err != nil {
		return nil, err
	}
	aead, err := e.aead(token)
	if err != nil {
		return nil, err
	}
	e.Nonce = make([]byte, aead.NonceSize())
	if _, err := rand.Read(e.Nonce); err != nil {
		return nil, err
	}
	e.Data = aead.Seal(nil, e.Nonce, plain, aad)
	return json.Marshal(e)
}

// open decrypts what seal wrote; ErrWrongToken when token is not the one
// it was sealed with.
func open(token string, sealed, aad []byte) ([]byte, error) {
	var e envelope
	if err := json.Unmarshal(sealed, &e); err != nil {
		return nil, fmt.Errorf("identity: stored value is not an identity envelope: %w", err)
	}
	if e.Version != envelopeV1 || e.KDF != kdfArgon2id {
		return nil, fmt.Errorf("identity: stored envelope version %d (%s) is not one this sqlkube reads", e.Version, e.KDF)
	}
	// Bounds keep a corrupt envelope from asking for absurd work.
	if e.Time == 0 || e.Time > 16 || e.Memory == 0 || e.Memory > 1<<21 || e.Threads == 0 || len(e.Salt) < 8 {
		return nil, errors.New("identity: stored envelope has invalid key-derivation parameters")
	}
	aead, err := e.aead(token)
	if err != nil {
		return nil, err
	}
	if len(e.Nonce) != aead.NonceSize() {
		return nil, errors.New("identity: stored envelope has a bad nonce")
	}
	plain, err := aead.Open(nil, e.Nonce, e.Data, aad)
	if err != nil {
		return nil, ErrWrongToken
	}
	return plain, nil
}

func (e *envelope) aead(token string) (cipher.AEAD, error) {
	key := argon2.IDKey([]byte(token), e.Salt, e.Time, e.Memory, e.Threads, keyLen)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
