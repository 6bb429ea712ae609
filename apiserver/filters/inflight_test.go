package filters

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// limitedServer serves every path through an InflightLimiter: requests
// with an X-Hold header signal entered and wait for release; X-User names
// the caller, X-Group its group.
func limitedServer(t *testing.T, readOnly, mutating int) (url string, entered chan struct{}, release chan struct{}) {
	t.Helper()
	entered, release = make(chan struct{}), make(chan struct{})
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			u := &user.DefaultInfo{Name: r.Header.Get("X-User"), Groups: []string{r.Header.Get("X-Group")}}
			c.SetRequest(r.WithContext(request.WithUser(r.Context(), u)))
			return next(c)
		}
	})
	e.Use(NewInflightLimiter(readOnly, mutating).Middleware)
	e.Any("/*", func(c echo.Context) error {
		if c.Request().Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			<-release
		}
		return c.String(http.StatusOK, "ok")
	})
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	return hs.URL, entered, release
}

func do(t *testing.T, method, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestInflightLimiter(t *testing.T) {
	url, entered, release := limitedServer(t, 1, 1)
	cms := url + "/api/v1/namespaces/default/configmaps"
	done := make(chan int, 4)
	hold := func(method, u string, header ...string) {
		go func() {
			req, _ := http.NewRequest(method, u, strings.NewReader("{}"))
			req.Header.Set("X-Hold", "1")
			req.Header.Set("X-User", "alice")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		<-entered
	}
	hold(http.MethodGet, cms+"/a")                                     // the one read-only slot
	hold(http.MethodPost, cms)                                         // the one mutating slot
	hold(http.MethodGet, cms+"?watch=1")                               // watches are not counted
	hold(http.MethodGet, url+"/api/v1/namespaces/default/pods/p/exec") // nor exec

	for _, tc := range []struct{ method, url string }{{http.MethodGet, cms}, {http.MethodGet, url + "/apis"}, {http.MethodPut, cms + "/a"}, {http.MethodDelete, cms + "/a"}} {
		resp := do(t, tc.method, tc.url, "X-User", "bob")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s %s over the budget: %d, Retry-After %q", tc.method, tc.url, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		var st metav1.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Kind != "Status" || st.Reason != metav1.StatusReasonTooManyRequests || st.Code != 429 {
			t.Fatalf("429 body: %v %+v", err, st)
		}
	}
	for _, tc := range []struct {
		name   string
		method string
		url    string
		header []string
	}{
		{"system:masters", http.MethodPost, cms, []string{"X-User", "admin", "X-Group", user.SystemPrivilegedGroup}},
		{"loopback", http.MethodGet, cms, []string{"X-User", user.APIServerUser}},
		{"healthz", http.MethodGet, url + "/healthz", nil},
	} {
		if resp := do(t, tc.method, tc.url, tc.header...); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s over the budget: %d, want 200 (exempt)", tc.name, resp.StatusCode)
		}
	}
	close(release)
	for range 4 {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("held request answered %d", code)
		}
	}
	// The slots are free again.
	if resp := do(t, http.MethodGet, cms, "X-User", "bob"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after release: %d", resp.StatusCode)
	}
	if resp := do(t, http.MethodPost, cms, "X-User", "bob"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after release: %d", resp.StatusCode)
	}
}

func TestInflightLimiter_Unlimited(t *testing.T) {
	url, entered, release := limitedServer(t, 0, 0)
	done := make(chan struct{})
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url+"/api/v1/pods", nil)
		req.Header.Set("X-Hold", "1")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		close(done)
	}()
	<-entered
	if resp := do(t, http.MethodGet, url+"/api/v1/pods"); resp.StatusCode != http.StatusOK {
		t.Fatalf("no limit configured, got %d", resp.StatusCode)
	}
	close(release)
	<-done
}

func TestInflightLimiter_PerUserShare(t *testing.T) {
	url, entered, release := limitedServer(t, 2, 0)
	cms := url + "/api/v1/namespaces/default/configmaps"
	done := make(chan int, 2)
	hold := func(who string) {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, cms, nil)
			req.Header.Set("X-Hold", "1")
			req.Header.Set("X-User", who)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		<-entered
	}
	hold("alice") // half of the budget of 2: alice's share
	if resp := do(t, http.MethodGet, cms, "X-User", "alice"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("alice beyond her share: %d, want 429", resp.StatusCode)
	}
	hold("bob") // the budget's other slot
	if resp := do(t, http.MethodGet, cms, "X-User", "carol"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("carol beyond the budget: %d, want 429", resp.StatusCode)
	}
	if resp := do(t, http.MethodPost, cms, "X-User", "alice"); resp.StatusCode != http.StatusOK {
		t.Fatalf("mutating budget unlimited, got %d", resp.StatusCode)
	}
	close(release)
	for range 2 {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("held request answered %d", code)
		}
	}
	if resp := do(t, http.MethodGet, cms, "X-User", "alice"); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice after release: %d", resp.StatusCode)
	}
}
