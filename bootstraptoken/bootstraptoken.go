// Package bootstraptoken creates, lists and deletes bootstrap tokens: the
// short-lived ID.SECRET bearer tokens (abcdef.0123456789abcdef) that new
// nodes join with, stored as bootstrap.kubernetes.io/token secrets named
// bootstrap-token-ID in kube-system, as kubeadm stores them. The API
// server authenticates a token as system:bootstrap:ID in the group
// system:bootstrappers (plus the token's extra groups) while its secret
// allows authentication and has not expired.
package bootstraptoken

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	bootstrapsecrets "k8s.io/cluster-bootstrap/util/secrets"
)

// DefaultGroup is the extra group tokens are made in unless told
// otherwise: the group node-join bindings name (kubeadm's is
// system:bootstrappers:kubeadm:default-node-token).
const DefaultGroup = "system:bootstrappers:sqlkube:default-node-token"

// DefaultUsages are what a token may be used for unless told otherwise:
// authenticating to the API and signing the cluster-info config map.
var DefaultUsages = []string{"authentication", "signing"}

var (
	// ErrInvalidToken is returned for a token or ID not of the form
	// [a-z0-9]{6}.[a-z0-9]{16} (or [a-z0-9]{6}).
	ErrInvalidToken = errors.New("bootstraptoken: a token is [a-z0-9]{6}.[a-z0-9]{16} and an ID [a-z0-9]{6}")
	// ErrNotFound is returned by Delete for a token that does not exist.
	ErrNotFound = errors.New("bootstraptoken: no such token")
	// ErrExists is returned by Create for a token ID already in use.
	ErrExists = errors.New("bootstraptoken: a token with this ID exists")
)

// Options describe a token to create.
type Options struct {
	// Token is the token to store; empty: a random one.
	Token string
	// TTL is how long the token lives (0: for ever).
	TTL time.Duration
	// Description is stored with the token.
	Description string
	// Usages (default DefaultUsages) and Groups (default DefaultGroup;
	// each must match system:bootstrappers:[a-z0-9:-]*[a-z0-9]).
	Usages, Groups []string
}

// Info is a stored token.
type Info struct {
	Token, Description string
	// Expires is zero for a token that does not expire.
	Expires        time.Time
	Usages, Groups []string
}

// Create stores a new token and returns it (ID.SECRET): ErrInvalidToken
// for a malformed Options.Token, ErrExists if its ID is taken, and the
// validation error of a bad usage or group.
func Create(ctx context.Context, client kubernetes.Interface, opts Options) (string, error) {
	token := opts.Token
	if token == "" {
		var err error
		if token, err = bootstraputil.GenerateBootstrapToken(); err != nil {
			return "", err
		}
	}
	id, secret, ok := strings.Cut(token, ".")
	if !ok || !bootstraputil.IsValidBootstrapToken(token) {
		return "", ErrInvalidToken
	}
	usages, groups := opts.Usages, opts.Groups
	if usages == nil {
		usages = DefaultUsages
	}
	if groups == nil {
		groups = []string{DefaultGroup}
	}
	if err := bootstraputil.ValidateUsages(usages); err != nil {
		return "", err
	}
	for _, g := range groups {
		if err := bootstraputil.ValidateBootstrapGroupName(g); err != nil {
			return "", err
		}
	}
	data := map[string]string{
		bootstrapapi.BootstrapTokenIDKey:     id,
		bootstrapapi.BootstrapTokenSecretKey: secret,
	}
	if opts.Description != "" {
		data[bootstrapapi.BootstrapTokenDescriptionKey] = opts.Description
	}
	if opts.TTL > 0 {
		data[bootstrapapi.BootstrapTokenExpirationKey] = time.Now().Add(opts.TTL).UTC().Format(time.RFC3339)
	}
	for _, u := range usages {
		data[bootstrapapi.BootstrapTokenUsagePrefix+u] = "true"
	}
	if len(groups) > 0 {
		data[bootstrapapi.BootstrapTokenExtraGroupsKey] = strings.Join(groups, ",")
	}
	_, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(id), Namespace: metav1.NamespaceSystem},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: data,
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return "", ErrExists
	}
	if err != nil {
		return "", err
	}
	return token, nil
}

// List returns the stored tokens, expired ones included (the server
// refuses them), by token.
func List(ctx context.Context, client kubernetes.Interface) ([]Info, error) {
	list, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("type", string(bootstrapapi.SecretTypeBootstrapToken)).String(),
	})
	if err != nil {
		return nil, err
	}
	var out []Info
	for i := range list.Items {
		s := &list.Items[i]
		id := bootstrapsecrets.GetData(s, bootstrapapi.BootstrapTokenIDKey)
		if name, ok := bootstrapsecrets.ParseName(s.Name); !ok || name != id {
			continue // not a well-formed token secret
		}
		info := Info{
			Token:       bootstraputil.TokenFromIDAndSecret(id, bootstrapsecrets.GetData(s, bootstrapapi.BootstrapTokenSecretKey)),
			Description: bootstrapsecrets.GetData(s, bootstrapapi.BootstrapTokenDescriptionKey),
		}
		if exp := bootstrapsecrets.GetData(s, bootstrapapi.BootstrapTokenExpirationKey); exp != "" {
			if t, err := time.Parse(time.RFC3339, exp); err == nil {
				info.Expires = t
			}
		}
		for k, v := range s.Data {
			if u, ok := strings.CutPrefix(k, bootstrapapi.BootstrapTokenUsagePrefix); ok && string(v) == "true" {
				info.Usages = append(info.Usages, u)
			}
		}
		slices.Sort(info.Usages)
		if g := bootstrapsecrets.GetData(s, bootstrapapi.BootstrapTokenExtraGroupsKey); g != "" {
			info.Groups = strings.Split(g, ",")
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Token < out[j].Token })
	return out, nil
}

// Delete removes a token, named by its ID or by the whole token:
// ErrInvalidToken if it is neither, ErrNotFound if there is no such token.
func Delete(ctx context.Context, client kubernetes.Interface, tokenOrID string) error {
	id, _, _ := strings.Cut(tokenOrID, ".")
	if !bootstraputil.IsValidBootstrapTokenID(id) || strings.Contains(tokenOrID, ".") && !bootstraputil.IsValidBootstrapToken(tokenOrID) {
		return ErrInvalidToken
	}
	err := client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, bootstraputil.BootstrapTokenSecretName(id), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return err
}
