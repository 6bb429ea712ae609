package handlers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	kubeletclient "k8s.io/kubernetes/pkg/kubelet/client"
)

// kubeletPreferredAddressTypes is the order node addresses are tried in:
// the InternalIP first, as nodes here seldom have resolvable names.
var kubeletPreferredAddressTypes = []string{
	string(corev1.NodeInternalIP), string(corev1.NodeHostName), string(corev1.NodeInternalDNS),
	string(corev1.NodeExternalDNS), string(corev1.NodeExternalIP),
}

// newKubeletConnections builds how the server reaches kubelets.
func (s *API) newKubeletConnections() (kubeletclient.ConnectionInfoGetter, error) {
	cfg := kubeletclient.KubeletClientConfig{
		Port:                  10250,
		PreferredAddressTypes: kubeletPreferredAddressTypes,
		TLSClientConfig: kubeletclient.KubeletTLSConfig{
			CertFile: s.KubeletCertFile, KeyFile: s.KubeletKeyFile, CAFile: s.KubeletCAFile,
		},
	}
	nodes := kubeletclient.NodeGetterFunc(func(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
		node := &corev1.Node{}
		r, _ := s.Registry.Lookup(corev1.SchemeGroupVersion.WithResource("nodes"))
		if err := s.storageFor(r).Get(ctx, r.Key("", name), k8sstorage.GetOptions{}, node); err != nil {
			return nil, storeerr.InterpretGetError(err, corev1.Resource("nodes"), name)
		}
		return node, nil
	})
	return kubeletclient.NewNodeConnectionInfoGetter(nodes, cfg)
}

// Kubelets is how the server reaches kubelets, made at first use (503
// if that failed).
func (s *API) Kubelets() (kubeletclient.ConnectionInfoGetter, error) {
	s.kubeletOnce.Do(func() { s.kubelets, s.kubeletErr = s.newKubeletConnections() })
	if s.kubeletErr != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("kubelet client: %v", s.kubeletErr))
	}
	return s.kubelets, nil
}
