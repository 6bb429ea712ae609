package apiserver_test

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// podOn is a pod bound to node that mounts secret.
func podOn(name, node, secret string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: secret},
			}}},
		},
	}
}

// nodeCluster has nodes n1 and n2, secrets s1 and s2 in default and the
// pods p1 (on n1, mounting s1) and p2 (on n2, mounting s2), and waits
// until the Node authorizer's graph has p1.
func nodeCluster(t *testing.T) *securedServer {
	t.Helper()
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	for _, n := range []string{"n1", "n2"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"s1", "s2"} {
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*corev1.Pod{podOn("p1", "n1", "s1"), podOn("p2", "n2", "s2")} {
		if _, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n1 := s.as("node1-token")
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := n1.CoreV1().Secrets("default").Get(ctx, "s1", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("n1 never got to read its pod's secret: %v", err)
	}
	return s
}

// TestNodeAuthorizer: a node reads its own pods, the secrets they mount
// and its own Node object, and nothing of other nodes'.
func TestNodeAuthorizer(t *testing.T) {
	s := nodeCluster(t)
	ctx := context.Background()
	n1 := s.as("node1-token")
	allowed := map[string]func() error{
		"get its pod p1": func() error { _, err := n1.CoreV1().Pods("default").Get(ctx, "p1", metav1.GetOptions{}); return err },
		"get its pod's secret s1": func() error {
			_, err := n1.CoreV1().Secrets("default").Get(ctx, "s1", metav1.GetOptions{})
			return err
		},
		"get its node": func() error { _, err := n1.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); return err },
		"list its pods by spec.nodeName": func() error {
			_, err := n1.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
			return err
		},
	}
	for name, call := range allowed {
		if err := call(); err != nil {
			t.Errorf("n1 may %s: %v", name, err)
		}
	}
	forbidden := map[string]func() error{
		"get p2 (on n2)": func() error { _, err := n1.CoreV1().Pods("default").Get(ctx, "p2", metav1.GetOptions{}); return err },
		"get s2 (p2's secret)": func() error {
			_, err := n1.CoreV1().Secrets("default").Get(ctx, "s2", metav1.GetOptions{})
			return err
		},
		"list secrets": func() error { _, err := n1.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); return err },
		"list every pod": func() error {
			_, err := n1.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list n2's pods": func() error {
			_, err := n1.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n2"})
			return err
		},
	}
	for name, call := range forbidden {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("n1 may not %s: %v, want 403", name, err)
		}
	}
	// Unlike kube-apiserver's defaults, nodes may read every Node: the
	// node agent routes to other nodes' pod CIDRs and runs kube-proxy
	// with the node's credential (system:node-proxier is bound to
	// system:nodes). Writing another Node stays forbidden.
	if _, err := n1.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{}); err != nil {
		t.Errorf("n1 reads node n2: %v, want it allowed (pod routes)", err)
	}
	if err := n1.CoreV1().Nodes().Delete(ctx, "n2", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 deletes node n2: %v, want 403", err)
	}
	// A user named like a node but outside system:nodes is not one: RBAC
	// decides, and gives it nothing (bob has no bindings either).
	if _, err := s.as("bob-token").CoreV1().Secrets("default").Get(ctx, "s1", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("bob reads s1: %v, want 403", err)
	}
	// Once p1 is gone, so is n1's access to s1.
	if err := s.as("admin-token").CoreV1().Pods("default").Delete(ctx, "p1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := n1.CoreV1().Secrets("default").Get(ctx, "s1", metav1.GetOptions{})
		return apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Errorf("n1 still reads s1 after p1 was deleted")
	}
}

// TestNodeRestriction: a node modifies only its own Node, Lease and
// pods' status, and creates only mirror pods bound to itself.
func TestNodeRestriction(t *testing.T) {
	s := nodeCluster(t)
	ctx := context.Background()
	n1 := s.as("node1-token")
	admin := s.as("admin-token")

	// Its own Node's status: allowed.
	node, err := n1.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}
	if _, err := n1.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Errorf("n1 updates its status: %v", err)
	}
	// Another node's status (the authorizer lets nodes update node
	// status; admission names whose).
	other, err := admin.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Status.Conditions = node.Status.Conditions
	if _, err := n1.CoreV1().Nodes().UpdateStatus(ctx, other, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 updates n2's status: %v, want 403", err)
	}
	if _, err := n1.CoreV1().Nodes().Patch(ctx, "n2", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 patches n2: %v, want 403", err)
	}
	// Nor its own taints.
	node, _ = n1.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	node.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := n1.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 taints itself: %v, want 403", err)
	}

	// Pod status: its own pods' only.
	for name, want := range map[string]bool{"p1": true, "p2": false} {
		pod, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = corev1.PodRunning
		_, err = n1.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if want && err != nil || !want && !apierrors.IsForbidden(err) {
			t.Errorf("n1 updates %s's status: %v (allowed: %v)", name, err, want)
		}
	}

	// Pods: only mirror pods bound to itself, owned by its Node.
	node, _ = n1.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	mirror := func(name, nodeName string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true)}},
			},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
	}
	if _, err := n1.CoreV1().Pods("default").Create(ctx, mirror("static-n1", "n1"), metav1.CreateOptions{}); err != nil {
		t.Errorf("n1 creates its mirror pod: %v", err)
	}
	if _, err := n1.CoreV1().Pods("default").Create(ctx, mirror("static-n2", "n2"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 creates a mirror pod on n2: %v, want 403", err)
	}
	plain := podOn("sneaky", "n1", "s2")
	if _, err := n1.CoreV1().Pods("default").Create(ctx, plain, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 creates a plain pod mounting s2: %v, want 403", err)
	}
	if err := n1.CoreV1().Pods("default").Delete(ctx, "p2", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 deletes p2 (on n2): %v, want 403", err)
	}

	// Leases: its own, in kube-node-lease.
	lease := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name)}}
	}
	if _, err := n1.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease("n1"), metav1.CreateOptions{}); err != nil {
		t.Errorf("n1 creates its lease: %v", err)
	}
	if _, err := n1.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease("n2"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("n1 creates n2's lease: %v, want 403", err)
	}

	// Evictions: of its own pods only.
	evict := func(name string) error {
		return n1.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	if err := evict("p2"); !apierrors.IsForbidden(err) {
		t.Errorf("n1 evicts p2: %v, want 403", err)
	}
	if err := evict("p1"); err != nil {
		t.Errorf("n1 evicts p1: %v", err)
	}
	// Tokens: only bound to its own pods.
	p2, err := admin.CoreV1().Pods("default").Get(ctx, "p2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = n1.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "p2", UID: p2.UID},
	}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("n1 asks for a token of p2's service account: %v, want 403", err)
	}
	checkUntouched(t, admin)
}

// checkUntouched: what the refused writes aimed at is as it was.
func checkUntouched(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	n2, err := admin.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if err != nil || len(n2.Status.Conditions) != 0 || n2.Labels["x"] != "" {
		t.Errorf("n2 changed: %+v %v", n2, err)
	}
	if _, err := admin.CoreV1().Pods("default").Get(ctx, "p2", metav1.GetOptions{}); err != nil {
		t.Errorf("p2: %v", err)
	}
	if _, err := admin.CoreV1().Pods("default").Get(ctx, "static-n2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("static-n2: %v, want 404", err)
	}
}
