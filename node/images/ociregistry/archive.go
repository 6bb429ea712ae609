package ociregistry

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// blob is where a blob's bytes are: a regular file's data, uncompressed
// and contiguous, in an archive that stays open while the registry serves.
type blob struct {
	file         *os.File
	offset, size int64
}

func (b blob) reader() *io.SectionReader { return io.NewSectionReader(b.file, b.offset, b.size) }

// read returns the blob's bytes, at most limit of them.
func (b blob) read(limit int64) ([]byte, error) {
	if b.size > limit {
		return nil, fmt.Errorf("%d bytes, over the limit of %d", b.size, limit)
	}
	data := make([]byte, b.size)
	if _, err := io.ReadFull(b.reader(), data); err != nil {
		return nil, err
	}
	return data, nil
}

// archive is an OCI image layout in a tar file, indexed: its blobs
// (blobs/ALGORITHM/HEX) by digest, and its index.json.
type archive struct {
	path  string
	file  *os.File
	blobs map[string]blob
	index []byte
}

// maxDocument bounds the JSON documents an archive's index names
// (index.json, indexes, manifests): containerd refuses manifests over
// 4 MiB too.
const maxDocument = 4 << 20

// openArchive opens and indexes the archive at p, reading only the tar
// headers and index.json. A compressed archive, one without index.json,
// or one whose blobs are sparse entries is refused.
func openArchive(p string) (*archive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	a := &archive{path: p, file: f, blobs: map[string]blob{}}
	if err := a.scan(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return a, nil
}

func (a *archive) scan() error {
	var magic [2]byte
	if n, _ := a.file.ReadAt(magic[:], 0); n == 2 && magic == [2]byte{0x1f, 0x8b} {
		return errors.New("a gzip-compressed archive: serve the uncompressed tar (gunzip it)")
	}
	tr := tar.NewReader(a.file)
	var index *blob
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("not a tar archive: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		isBlob := strings.HasPrefix(name, "blobs/")
		if !isBlob && name != "index.json" {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			continue // directories, links: an OCI layout's blobs are files
		}
		if isSparse(h) {
			return fmt.Errorf("%s is a sparse tar entry, which this registry cannot serve in place", h.Name)
		}
		// tar.Reader reads headers with whole-block reads and nothing
		// more, so the file's offset now is where this entry's data is.
		off, err := a.file.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		b := blob{file: a.file, offset: off, size: h.Size}
		if name == "index.json" {
			index = &b
			continue
		}
		alg, enc, _ := strings.Cut(strings.TrimPrefix(name, "blobs/"), "/")
		if d := alg + ":" + enc; validDigest(d) {
			a.blobs[d] = b
		}
	}
	if index == nil {
		return errors.New("no index.json: not an OCI image layout (a docker save archive without one is not served)")
	}
	var err error
	if a.index, err = index.read(maxDocument); err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	return nil
}

// isSparse reports whether h is a sparse file of GNU's or PAX's kind, whose
// data in the archive is not the file's bytes in order.
func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}
