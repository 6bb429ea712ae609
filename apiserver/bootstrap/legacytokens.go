package bootstrap

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/controlplane/controller/legacytokentracking"
)

// ensureLegacyTokenTracking creates the ConfigMap that says since when
// the API server records the use of legacy service-account tokens (the
// kubernetes.io/legacy-token-last-used label, which sqlkube's
// authenticator sets), where it is missing, with today's date, as
// kube-apiserver's legacy-token-tracking controller does. It is made
// here, before the controllers start, because the controller manager's
// legacy-token cleaner reads it at its start, and in one process the two
// would race. An existing one is left as it is.
func ensureLegacyTokenTracking(ctx context.Context, cs clientset.Interface) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: legacytokentracking.ConfigMapName},
		Data:       map[string]string{legacytokentracking.ConfigMapDataKey: time.Now().UTC().Format(time.DateOnly)},
	}
	_, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("apiserver: creating %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}
