package filters

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// maxAuditBody is the largest request or response body a Request or
// RequestResponse event keeps (larger ones are left out).
const maxAuditBody = 256 << 10

// AuditOptions configure the audit log.
type AuditOptions struct {
	// Out receives one audit.k8s.io/v1 Event per line (JSON).
	Out io.Writer
	// PolicyFile is an audit.k8s.io/v1 Policy; empty: every request at
	// Metadata level.
	PolicyFile string
}

// Auditor writes the audit log: for each request an event at
// ResponseComplete (and, for watches and other long-running requests, one
// at ResponseStarted), at the level the policy gives it. Events never
// carry headers (so no Authorization header or bearer token), and the
// bodies of secrets, token reviews and service-account token requests are
// never logged, whatever the policy says (their level is capped at
// Metadata). Events whose stage the policy omits are not written.
type Auditor struct {
	policy audit.PolicyRuleEvaluator
	enc    runtime.Encoder
	mu     sync.Mutex // guards out: one line per write
	out    io.Writer
}

// NewAuditor loads the policy file, if any.
func NewAuditor(o AuditOptions) (*Auditor, error) {
	if o.Out == nil {
		return nil, errors.New("apiserver: audit log needs a writer")
	}
	a := &Auditor{out: o.Out, enc: audit.Codecs.LegacyCodec(auditv1.SchemeGroupVersion),
		policy: policy.NewFakePolicyRuleEvaluator(auditinternal.LevelMetadata, nil)}
	if o.PolicyFile != "" {
		p, err := policy.LoadPolicyFromFile(o.PolicyFile)
		if err != nil {
			return nil, fmt.Errorf("apiserver: audit policy: %w", err)
		}
		a.policy = policy.NewPolicyRuleEvaluator(p)
	}
	return a, nil
}

// sensitive requests carry credentials or secret data in their bodies.
func sensitive(info *request.RequestInfo) bool {
	switch {
	case !info.IsResourceRequest:
		return false
	case info.APIGroup == "" && info.Resource == "secrets":
		return true
	case info.APIGroup == "" && info.Resource == "serviceaccounts" && info.Subresource == "token":
		return true
	case info.APIGroup == "authentication.k8s.io": // tokenreviews, selfsubjectreviews
		return true
	}
	return false
}

// Middleware runs after Authentication (the user is in the context).
func (a *Auditor) Middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		received := time.Now()
		info, err := RequestInfoOf(req)
		if err != nil {
			info = &request.RequestInfo{Path: req.URL.Path, Verb: req.Method}
		}
		u, _ := request.UserFrom(req.Context())
		rc := a.policy.EvaluatePolicyRule(authorizer.AttributesRecord{
			User: u, Verb: info.Verb, Namespace: info.Namespace, APIGroup: info.APIGroup, APIVersion: info.APIVersion,
			Resource: info.Resource, Subresource: info.Subresource, Name: info.Name,
			ResourceRequest: info.IsResourceRequest, Path: info.Path,
		})
		level := rc.Level
		if level == auditinternal.LevelNone {
			return next(c)
		}
		if sensitive(info) && level.GreaterOrEqual(auditinternal.LevelRequest) {
			level = auditinternal.LevelMetadata
		}
		ev := newAuditEvent(req, info, u, level, received)
		c.Response().Header().Set(auditinternal.HeaderAuditID, string(ev.AuditID))
		longRunning := info.Verb == "watch" || LongRunningSubresources.Has(info.Subresource)
		if level.GreaterOrEqual(auditinternal.LevelRequest) && !longRunning {
			ev.RequestObject = readAuditBody(req)
		}
		var captured *bytes.Buffer
		if level.GreaterOrEqual(auditinternal.LevelRequestResponse) && !longRunning {
			captured = &bytes.Buffer{}
			c.Response().Writer = &capturingWriter{ResponseWriter: c.Response().Writer, buf: captured}
		}
		if longRunning {
			c.Response().Before(func() {
				started := *ev
				started.ImpersonatedUser = auditUserInfo(ImpersonatedUser(c))
				started.Stage = auditinternal.StageResponseStarted
				started.StageTimestamp = metav1.NewMicroTime(time.Now())
				started.ResponseStatus = &metav1.Status{Code: int32(c.Response().Status)}
				a.write(&started, rc.OmitStages)
			})
		}
		if err := next(c); err != nil {
			c.Error(err) // the error handler writes the Status, so its code is known
		}
		ev.Stage = auditinternal.StageResponseComplete
		ev.ImpersonatedUser = auditUserInfo(ImpersonatedUser(c))
		ev.StageTimestamp = metav1.NewMicroTime(time.Now())
		ev.ResponseStatus = &metav1.Status{Code: int32(c.Response().Status)}
		if st, ok := c.Get(responses.StatusKey).(metav1.Status); ok && st.Status == metav1.StatusFailure {
			// As kube-apiserver logs failures: status, reason, message.
			ev.ResponseStatus.Status, ev.ResponseStatus.Reason, ev.ResponseStatus.Message = st.Status, st.Reason, st.Message
		}
		if name, ok := c.Get(responses.CreatedNameKey).(string); ok && ev.ObjectRef != nil && ev.ObjectRef.Name == "" {
			ev.ObjectRef.Name = name
		}
		if captured != nil && captured.Len() <= maxAuditBody {
			ev.ResponseObject = auditJSON(captured.Bytes(), c.Response().Header().Get("Content-Type"))
		}
		a.write(ev, rc.OmitStages)
		return nil
	}
}

func newAuditEvent(req *http.Request, info *request.RequestInfo, u user.Info, level auditinternal.Level, received time.Time) *auditinternal.Event {
	ev := &auditinternal.Event{
		Level: level, AuditID: types.UID(uuid.NewString()), RequestURI: req.URL.RequestURI(), Verb: info.Verb,
		UserAgent: req.UserAgent(), RequestReceivedTimestamp: metav1.NewMicroTime(received),
	}
	for _, ip := range utilnet.SourceIPs(req) {
		ev.SourceIPs = append(ev.SourceIPs, ip.String())
	}
	if u != nil {
		ev.User = *auditUserInfo(u)
	}
	if info.IsResourceRequest {
		ev.ObjectRef = &auditinternal.ObjectReference{
			Resource: info.Resource, Namespace: info.Namespace, Name: info.Name,
			APIGroup: info.APIGroup, APIVersion: info.APIVersion, Subresource: info.Subresource,
		}
	}
	return ev
}

// auditUserInfo is u as the audit log names users (nil for nil).
func auditUserInfo(u user.Info) *authnv1.UserInfo {
	if u == nil {
		return nil
	}
	info := &authnv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	for k, v := range u.GetExtra() {
		if info.Extra == nil {
			info.Extra = map[string]authnv1.ExtraValue{}
		}
		info.Extra[k] = v
	}
	return info
}

// readAuditBody returns a request body as JSON (nil for an empty, too
// large or undecodable one) and leaves it in place for the handler.
func readAuditBody(req *http.Request) *runtime.Unknown {
	if req.Body == nil {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxAuditBody+1))
	req.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), req.Body), req.Body}
	if err != nil || len(body) > maxAuditBody {
		return nil
	}
	return auditJSON(body, req.Header.Get("Content-Type"))
}

// auditJSON is body as JSON: JSON (and the patch types, which are JSON)
// as it is, protobuf decoded and encoded again; nil for anything else.
func auditJSON(body []byte, contentType string) *runtime.Unknown {
	if len(body) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil
	}
	switch mt {
	case runtime.ContentTypeJSON, string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyPatchType):
		return &runtime.Unknown{Raw: body, ContentType: runtime.ContentTypeJSON}
	case runtime.ContentTypeProtobuf:
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			return nil
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil
		}
		return &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
	}
	return nil
}

func (a *Auditor) write(ev *auditinternal.Event, omit []auditinternal.Stage) {
	for _, s := range omit {
		if s == ev.Stage {
			return
		}
	}
	line, err := runtime.Encode(a.enc, ev)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _ = a.out.Write(line)
}

// capturingWriter keeps a copy of the first maxAuditBody+1 bytes of a
// response.
type capturingWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
}

func (w *capturingWriter) Write(p []byte) (int, error) {
	if room := maxAuditBody + 1 - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(len(p), room)])
	}
	return w.ResponseWriter.Write(p)
}

func (w *capturingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *capturingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
