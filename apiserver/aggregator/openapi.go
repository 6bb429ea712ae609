package aggregator

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationhelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
)

// OpenAPI of aggregated group-versions: the /openapi/v3 index names
// apis/GROUP/VERSION of every available APIService with a service, and
// /openapi/v3/apis/GROUP/VERSION is its backend's document, fetched as
// the aggregator. /openapi/v2 leaves them out.

// WithV3Paths adds the aggregated group-versions to the
// /openapi/v3 index (index is returned unchanged when there are none or
// it cannot be read).
func (a *Aggregator) WithV3Paths(index []byte) []byte {
	groups := a.remoteGroups()
	if len(groups) == 0 {
		return index
	}
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(index, &doc); err != nil || doc.Paths == nil {
		return index
	}
	for _, svcs := range groups {
		for _, svc := range svcs {
			if !apiregistrationhelper.IsAPIServiceConditionTrue(svc, apiregistrationv1.Available) {
				continue
			}
			p := "apis/" + svc.Spec.Group + "/" + svc.Spec.Version
			// No hash: the document is the backend's, fetched when asked
			// for.
			doc.Paths[p], _ = json.Marshal(map[string]string{"serverRelativeURL": "/openapi/v3/" + p})
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return index
	}
	return out
}

// ServeOpenAPIV3 answers /openapi/v3/apis/GROUP/VERSION from svc's
// backend (503 when it is not available or does not answer).
func (a *Aggregator) ServeOpenAPIV3(c echo.Context, svc *apiregistrationv1.APIService, path string) error {
	if strings.Count(strings.Trim(path, "/"), "/") != 2 {
		return responses.Status(c, apierrors.NewNotFound(apiregistrationv1.Resource("openapi"), path))
	}
	if !apiregistrationhelper.IsAPIServiceConditionTrue(svc, apiregistrationv1.Available) {
		return responses.Status(c, apierrors.NewServiceUnavailable("APIService "+svc.Name+" is not available"))
	}
	body, err := a.fetch(c.Request().Context(), svc, "/openapi/v3/"+path, "application/json")
	if err != nil {
		return responses.Status(c, apierrors.NewServiceUnavailable(err.Error()))
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
}
