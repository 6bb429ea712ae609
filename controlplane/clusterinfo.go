package controlplane

import (
	"context"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// ClusterInfoClientCAKey is the key of kube-public/cluster-info that
// holds the client CA, which signs the admin kubeconfig's certificate and
// the other users': a joined node's kubelet trusts it beside the cluster
// CA, as the server's own node does, so that the admin reads its
// endpoints directly. Not signed, unlike the kubeconfig: a node reads it
// only over a connection it verifies with the cluster CA.
const ClusterInfoClientCAKey = "client-ca.crt"

// ensureClusterInfo publishes where the cluster is, as kubeadm does, for
// nodes that join with a bootstrap token: the ConfigMap kube-public/
// cluster-info holding a kubeconfig with the API's URL and the cluster CA
// (the bootstrap-signer controller signs it with each signing token) and
// the client CA (ClusterInfoClientCAKey), and the Role and RoleBinding
// that let anyone read it, without credentials.
func ensureClusterInfo(ctx context.Context, cfg *rest.Config, url, caFile, clientCAFile string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	clientCA, err := os.ReadFile(clientCAFile)
	if err != nil {
		return err
	}
	want := map[string]string{ClusterInfoClientCAKey: string(clientCA)}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[""] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: ca}
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	want[bootstrapapi.KubeConfigKey] = string(data)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := metav1.NamespacePublic
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "sqlkube:bootstrap-signer-clusterinfo", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{bootstrapapi.ConfigMapClusterInfo}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"}},
	}
	// The namespace comes from the server's bootstrap; retry briefly.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: bootstrapapi.ConfigMapClusterInfo, Namespace: ns},
				Data:       want,
			}
			_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			return err == nil, nil
		case err != nil:
			return false, nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		changed := false
		for k, v := range want {
			if cm.Data[k] != v {
				cm.Data[k], changed = v, true
			}
		}
		if !changed {
			return true, nil
		}
		// The URL or a CA changed: the signer re-signs the kubeconfig.
		_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		return err == nil, nil
	})
}
