package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
)

// The admission plugins kube-apiserver enables by default beside those
// admission_test.go covers: each one's effect, through the API.

// TestAdmission_DefaultTolerationSeconds: a pod gets the not-ready and
// unreachable NoExecute tolerations of 300 s unless it has its own.
func TestAdmission_DefaultTolerationSeconds(t *testing.T) {
	ctx := context.Background()
	pods := kubernetes.NewForConfigOrDie(newServer(t)).CoreV1().Pods("default")
	got, err := pods.Create(ctx, simplePod("a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
	if !tolerationsEqual(got.Spec.Tolerations, want) {
		t.Errorf("tolerations %v, want %v", got.Spec.Tolerations, want)
	}

	own := simplePod("b")
	own.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)}}
	got, err = pods.Create(ctx, own, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = []corev1.Toleration{own.Spec.Tolerations[0], want[1]}
	if !tolerationsEqual(got.Spec.Tolerations, want) {
		t.Errorf("tolerations %v, want the pod's own not-ready one and the default unreachable one", got.Spec.Tolerations)
	}

	// --disable-admission-plugins names it too.
	cfg, _ := newServerWith(t, apiserver.Config{DisableAdmissionPlugins: []string{"ServiceAccount", "DefaultTolerationSeconds"}})
	got, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("default").Create(ctx, simplePod("a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Tolerations) != 0 {
		t.Errorf("tolerations %v with DefaultTolerationSeconds disabled, want none", got.Spec.Tolerations)
	}
}

func tolerationsEqual(got, want []corev1.Toleration) bool {
	return slices.EqualFunc(got, want, func(a, b corev1.Toleration) bool {
		return a.MatchToleration(&b) && ptr.Equal(a.TolerationSeconds, b.TolerationSeconds)
	})
}

// TestAdmission_TaintNodesByCondition: a new node is tainted not-ready
// NoSchedule (the node lifecycle controller lifts it once it is Ready).
func TestAdmission_TaintNodesByCondition(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	if !slices.ContainsFunc(node.Spec.Taints, func(got corev1.Taint) bool { return got.MatchTaint(&want) }) {
		t.Errorf("taints %v, want %v", node.Spec.Taints, want)
	}
}

// TestAdmission_Storage: DefaultStorageClass gives a claim without a
// class the default one; StorageObjectInUseProtection puts the
// protection finalizers on claims and volumes; PersistentVolumeClaimResize
// refuses to grow a bound claim whose class does not allow expansion.
func TestAdmission_Storage(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	classes := cs.StorageV1().StorageClasses()
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "standard", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
			Provisioner: "example.com/disk", AllowVolumeExpansion: ptr.To(false)},
		{ObjectMeta: metav1.ObjectMeta{Name: "growing"}, Provisioner: "example.com/disk", AllowVolumeExpansion: ptr.To(true)},
	} {
		if _, err := classes.Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claims := cs.CoreV1().PersistentVolumeClaims("default")
	claim := func(name string, class *string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: class,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
	}
	// The plugin reads classes from the server's informer: wait for it.
	eventually(t, "the default class on a dry-run claim", func() bool {
		got, err := claims.Create(ctx, claim("probe", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(got.Spec.StorageClassName, "") == "standard"
	})
	defaulted, err := claims.Create(ctx, claim("defaulted", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(defaulted.Spec.StorageClassName, "<nil>"); got != "standard" {
		t.Errorf("storageClassName %s, want the default class, standard", got)
	}
	if !slices.Contains(defaulted.Finalizers, "kubernetes.io/pvc-protection") {
		t.Errorf("claim finalizers %v, want kubernetes.io/pvc-protection", defaulted.Finalizers)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/pv1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pv.Finalizers, "kubernetes.io/pv-protection") {
		t.Errorf("volume finalizers %v, want kubernetes.io/pv-protection", pv.Finalizers)
	}

	// Growing a bound claim: refused for the default class (no
	// expansion), allowed for the growing one.
	grow := func(c *corev1.PersistentVolumeClaim) error {
		c.Status.Phase = corev1.ClaimBound
		c, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		_, err = claims.Update(ctx, c, metav1.UpdateOptions{})
		return err
	}
	err = grow(defaulted)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the storageclass that provisions the pvc must support resize") {
		t.Errorf("growing a claim of a class without expansion: %v, want 403", err)
	}
	growing, err := claims.Create(ctx, claim("growing", ptr.To("growing")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := grow(growing); err != nil {
		t.Errorf("growing a claim of a class that allows expansion: %v", err)
	}
}

// TestAdmission_DefaultIngressClass: an Ingress without a class gets
// the default IngressClass.
func TestAdmission_DefaultIngressClass(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	_, err := cs.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ingresses := cs.NetworkingV1().Ingresses("default")
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}},
	}
	eventually(t, "the default class on a dry-run ingress", func() bool {
		got, err := ingresses.Create(ctx, ing, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(got.Spec.IngressClassName, "") == "nginx"
	})
	got, err := ingresses.Create(ctx, ing, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := ptr.Deref(got.Spec.IngressClassName, "<nil>"); c != "nginx" {
		t.Errorf("ingressClassName %s, want the default class, nginx", c)
	}
}

// TestAdmission_PodTopologyLabels: a pod bound to a node gets the node's
// topology labels.
func TestAdmission_PodTopologyLabels(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	zone := map[string]string{corev1.LabelTopologyZone: "z1", corev1.LabelTopologyRegion: "r1", "rack": "7"}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: zone}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := cs.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, simplePod("a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	// The plugin reads nodes from the server's informer: wait for n1.
	eventually(t, "a dry-run binding admitted", func() bool {
		return pods.Bind(ctx, binding, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}) == nil
	})
	if err := pods.Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := pods.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[corev1.LabelTopologyZone] != "z1" || got.Labels[corev1.LabelTopologyRegion] != "r1" || got.Labels["rack"] != "" {
		t.Errorf("labels %v, want the node's zone and region only", got.Labels)
	}
}

// TestAdmission_Certificates: CertificateSubjectRestriction refuses a
// kube-apiserver-client request for system:masters; CertificateApproval,
// CertificateSigning and ClusterTrustBundleAttest refuse to approve,
// sign or attest for a signer the writer is not allowed to ("approve",
// "sign", "attest" on signers), and let it once it is.
func TestAdmission_Certificates(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	csrs := admin.CertificatesV1().CertificateSigningRequests()

	_, err := csrs.Create(ctx, csrFor(t, "masters", certificatesv1.KubeAPIServerClientSignerName, "system:masters"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed") {
		t.Fatalf("a client certificate request for system:masters: %v, want 403", err)
	}

	const signer = "example.com/widgets"
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "writer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get"}},
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}, Verbs: []string{"update"}},
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"clustertrustbundles"}, Verbs: []string{"create"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bindClusterRole(t, admin, "writer", "writer")
	csr, err := csrs.Create(ctx, csrFor(t, "widget", signer, "devs"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writer := kubernetes.NewForConfigOrDie(&rest.Config{Host: cfg.Host, Impersonate: rest.ImpersonationConfig{UserName: "writer"}}).CertificatesV1()
	approve := func() error {
		c, err := writer.CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test",
		})
		_, err = writer.CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
		return err
	}
	sign := func() error {
		c, err := writer.CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Certificate = []byte(caCertificatePEM(t))
		_, err = writer.CertificateSigningRequests().UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	}
	attest := func() error {
		_, err := writer.ClusterTrustBundles().Create(ctx, &certificatesv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: "example.com:widgets:one"},
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: caCertificatePEM(t)},
		}, metav1.CreateOptions{})
		return err
	}
	steps := []struct {
		verb string
		try  func() error
	}{{"approve", approve}, {"sign", sign}, {"attest", attest}}
	// The writer's role reaches the authorizer through its informers.
	eventually(t, "the writer's role", func() bool {
		_, err := writer.CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		return err == nil
	})
	for _, step := range steps {
		err := step.try()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "user not permitted to "+step.verb) {
			t.Errorf("%s without %q on signers: %v, want 403", step.verb, step.verb, err)
		}
	}

	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "widget-signer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"},
			ResourceNames: []string{signer}, Verbs: []string{"approve", "sign", "attest"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bindClusterRole(t, admin, "widget-signer", "writer")
	for _, step := range steps {
		eventually(t, step.verb+" with the signer's role", func() bool {
			err := step.try()
			if err != nil && !apierrors.IsForbidden(err) {
				t.Fatalf("%s: %v", step.verb, err)
			}
			return err == nil
		})
	}
}

// bindClusterRole binds the cluster role to user.
func bindClusterRole(t *testing.T, cs kubernetes.Interface, role, user string) {
	t.Helper()
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// csrFor is a CertificateSigningRequest of a new key for a client
// certificate in group org, asked of signer.
func csrFor(t *testing.T, name, signer, org string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name, Organization: []string{org}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: signer,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}
