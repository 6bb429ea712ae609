package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// upgradeFixture is the data directory of sqlkube on Kubernetes v1.34.2
// (data/) and what that server listed (objects.json); see its README.
const upgradeFixture = "testdata/upgrade-v1.34.2/fixture.tar.gz"

// fixtureLabel marks the objects the fixture's script created, with
// the value fixtureRelease.
const fixtureLabel, fixtureRelease = "upgrade.sqlkube.io/fixture", "v1.34.2"

// fixtureObject is one object the old server listed.
type fixtureObject struct {
	// Resource is kubectl's name of its resource: plural[.group].
	Resource        string `json:"resource"`
	APIVersion      string `json:"apiVersion"`
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	// Controller is the Kind/name of its controlling owner, if any.
	Controller string `json:"controller"`
	// Object is the whole object but status and managedFields, for the
	// fixture's own objects (labelled fixtureLabel); nil for the others.
	Object map[string]any `json:"object"`
}

func (o fixtureObject) String() string {
	if o.Namespace == "" {
		return o.Resource + " " + o.Name
	}
	return o.Resource + " " + o.Namespace + "/" + o.Name
}

// fixtureManifest is objects.json.
type fixtureManifest struct {
	Server  string          `json:"server"`
	Objects []fixtureObject `json:"objects"`
}

// unpackFixture writes the fixture's files under dir (data/ and
// objects.json, with their modes) and returns objects.json.
func unpackFixture(t *testing.T, dir string) fixtureManifest {
	t.Helper()
	f, err := os.Open(upgradeFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			t.Fatalf("%s: %q is outside the archive", upgradeFixture, h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, h.FileInfo().Mode().Perm())
		case tar.TypeReg:
			err = writeFileFrom(p, tr, h.FileInfo().Mode().Perm())
		default:
			err = fmt.Errorf("%s: %q is neither a file nor a directory", upgradeFixture, h.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "objects.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m fixtureManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("objects.json: %v", err)
	}
	return m
}

func writeFileFrom(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// storedVersions reads the SQLite datastore of dataDir (no server may
// be running on it) and returns the apiVersion each key under /registry/
// is stored in: the protobuf envelope's, or a JSON object's.
func storedVersions(t *testing.T, dataDir string) map[string]string {
	t.Helper()
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: "sqlite://" + filepath.Join(dataDir, "state.db"), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	res, err := store.Range(ctx, sqlstore.RangeRequest{Key: []byte("/registry/"), End: []byte("/registry0")})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(res.KVs))
	for _, kv := range res.KVs {
		out[string(kv.Key)] = storedAPIVersion(kv.Value)
	}
	return out
}

// storedAPIVersion is the apiVersion of a stored value ("" when it is
// neither Kubernetes' protobuf nor a JSON object).
func storedAPIVersion(v []byte) string {
	if rest, ok := bytes.CutPrefix(v, []byte("k8s\x00")); ok {
		var u runtime.Unknown
		if err := u.Unmarshal(rest); err != nil {
			return ""
		}
		return u.APIVersion
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(v, &tm); err != nil {
		return ""
	}
	return tm.APIVersion
}

// keysUnder are the keys of versions under prefix, sorted.
func keysUnder(versions map[string]string, prefix string) []string {
	var keys []string
	for k := range versions {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// notWithin lists where want is not within got: each field of a map in
// want must be in got with a value want is within, lists must have the
// same length and each element be within got's, and anything else must
// be equal. So fields got gained (new defaults) are no difference;
// fields it lost or changed are.
func notWithin(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v, want an object", path, got)}
		}
		var out []string
		for _, k := range slices.Sorted(maps.Keys(w)) {
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s.%s: gone (was %v)", path, k, w[k]))
				continue
			}
			out = append(out, notWithin(path+"."+k, w[k], gv)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v, want %v", path, got, want)}
		}
		var out []string
		for i := range w {
			out = append(out, notWithin(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: %v, want %v", path, got, want)}
		}
		return nil
	}
}

// asJSON is v through encoding/json (numbers as float64), as
// objects.json decodes.
func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
