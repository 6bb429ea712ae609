package authn

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// staticTokens authenticates the bearer tokens of a --token-auth-file. A
// lookup compares the token's SHA-256 with every entry's in constant time
// and never stops early, so how long it takes does not tell which tokens
// exist.
type staticTokens struct {
	entries []staticToken
}

type staticToken struct {
	sum  [sha256.Size]byte
	user *user.DefaultInfo
}

// LoadTokenFile reads a CSV of token,user,uid[,"group1,group2"] lines (as
// kube-apiserver's --token-auth-file; lines starting with # are skipped).
func LoadTokenFile(path string) (*staticTokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	r.Comment = '#'
	st := &staticTokens{}
	seen := map[[sha256.Size]byte]bool{}
	for line := 1; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("token file %s: %w", path, err)
		}
		if len(rec) < 3 || rec[0] == "" || rec[1] == "" {
			return nil, fmt.Errorf("token file %s: line %d: want token,user,uid[,groups]", path, line)
		}
		u := &user.DefaultInfo{Name: rec[1], UID: rec[2]}
		if len(rec) > 3 && rec[3] != "" {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		sum := sha256.Sum256([]byte(rec[0]))
		if seen[sum] {
			return nil, fmt.Errorf("token file %s: line %d: duplicate token", path, line)
		}
		seen[sum] = true
		st.entries = append(st.entries, staticToken{sum: sum, user: u})
	}
	return st, nil
}

func (st *staticTokens) AuthenticateToken(_ context.Context, token string) (*authenticator.Response, bool, error) {
	sum := sha256.Sum256([]byte(token))
	var found *user.DefaultInfo
	for i := range st.entries {
		if subtle.ConstantTimeCompare(sum[:], st.entries[i].sum[:]) == 1 {
			found = st.entries[i].user
		}
	}
	if found == nil {
		return nil, false, nil
	}
	u := *found
	u.Groups = append([]string(nil), found.Groups...)
	return &authenticator.Response{User: &u}, true, nil
}
