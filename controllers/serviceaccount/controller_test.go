package serviceaccount

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// newFixture is a controller over a fake client whose informers' caches
// hold objs (not started: Sync reads the preloaded caches).
func newFixture(t *testing.T, objs ...runtime.Object) (*Controller, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	nsInformer, saInformer := factory.Core().V1().Namespaces(), factory.Core().V1().ServiceAccounts()
	for _, obj := range objs {
		var err error
		switch obj.(type) {
		case *corev1.Namespace:
			err = nsInformer.Informer().GetStore().Add(obj)
		case *corev1.ServiceAccount:
			err = saInformer.Informer().GetStore().Add(obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Options{Client: client, Namespaces: nsInformer, ServiceAccounts: saInformer})
	if err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	return c, client
}

func TestController_Sync(t *testing.T) {
	now := metav1.NewTime(time.Now())
	active := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	terminating := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "old", DeletionTimestamp: &now}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	existing := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName, Namespace: "team"}}
	tests := []struct {
		name       string
		objs       []runtime.Object
		namespace  string
		wantCreate bool
	}{
		{name: "missing account is created", objs: []runtime.Object{active}, namespace: "team", wantCreate: true},
		{name: "existing account is left alone", objs: []runtime.Object{active, existing}, namespace: "team"},
		{name: "terminating namespace is skipped", objs: []runtime.Object{terminating}, namespace: "old"},
		{name: "deleted namespace is skipped", namespace: "gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, client := newFixture(t, tt.objs...)
			if err := c.Sync(context.Background(), tt.namespace); err != nil {
				t.Fatal(err)
			}
			created := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "create" && a.GetResource().Resource == "serviceaccounts" {
					created++
				}
			}
			if got, want := created == 1, tt.wantCreate; got != want || created > 1 {
				t.Fatalf("created %d service accounts, want create=%v (actions %v)", created, want, client.Actions())
			}
			if tt.wantCreate {
				sa, err := client.CoreV1().ServiceAccounts(tt.namespace).Get(context.Background(), DefaultName, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("default service account: %v", err)
				}
				if sa.Name != DefaultName {
					t.Fatalf("got %q", sa.Name)
				}
			}
		})
	}
}

func TestController_SyncAlreadyCreated(t *testing.T) {
	// The cache has not seen the account another writer created: the
	// conflict is not an error.
	active := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	c, client := newFixture(t, active)
	if _, err := client.CoreV1().ServiceAccounts("team").Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(context.Background(), "team"); err != nil {
		t.Fatalf("sync after a concurrent create: %v", err)
	}
}
