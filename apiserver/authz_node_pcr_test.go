package apiserver_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestNodeAuthorizer_PodCertificateRequests: the Node authorizer's graph
// follows pod certificate requests, as kube-apiserver's does: a node gets
// the requests of its own node and lists them by spec.nodeName, and
// neither gets another node's request nor lists them all.
func TestNodeAuthorizer_PodCertificateRequests(t *testing.T) {
	s := nodeCluster(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	csr, err := base64.StdEncoding.DecodeString(stubPKCS10Request(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ name, pod, node string }{{"pcr-n1", "p1", "n1"}, {"pcr-n2", "p2", "n2"}} {
		node, err := admin.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod, err := admin.CoreV1().Pods("default").Get(ctx, r.pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CertificatesV1().PodCertificateRequests("default").Create(ctx, &certificatesv1.PodCertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Name: r.name},
			Spec: certificatesv1.PodCertificateRequestSpec{
				SignerName: "example.com/signer", PodName: pod.Name, PodUID: pod.UID,
				ServiceAccountName: "default", ServiceAccountUID: "uid-sa", NodeName: types.NodeName(node.Name), NodeUID: node.UID,
				MaxExpirationSeconds: ptr.To[int32](86400), StubPKCS10Request: csr,
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n1 := s.as("node1-token").CertificatesV1().PodCertificateRequests("default")
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := n1.Get(ctx, "pcr-n1", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("n1 never got to read its pod certificate request: %v", err)
	}
	if _, err := n1.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"}); err != nil {
		t.Errorf("n1 lists its requests by spec.nodeName: %v", err)
	}
	if _, err := n1.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 lists every request: %v, want 403", err)
	}
	if _, err := n1.Get(ctx, "pcr-n2", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 gets n2's request: %v, want 403", err)
	}
}
