package images

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// ReadTree returns the files under the host directory root as an image's
// files, root being the image's "/": regular files with their content,
// directories, symbolic links, and hard links (the first of a set of
// links, in the layer's order, holds the content; the others link to it).
// Modes keep their setuid, setgid and sticky bits, and entries keep their
// owners. Device nodes, sockets and named pipes are left out: the runtime
// makes a container's /dev.
func ReadTree(root string) ([]File, error) {
	type inode struct{ dev, ino uint64 }
	var files []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		f := File{Path: "/" + filepath.ToSlash(rel), Mode: modeBits(info.Mode())}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			f.Uid, f.Gid = int(st.Uid), int(st.Gid)
		}
		switch t := info.Mode().Type(); {
		case t == 0:
			if f.Data, err = os.ReadFile(p); err != nil {
				return err
			}
		case t == fs.ModeDir:
			f.Dir = true
		case t == fs.ModeSymlink:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("images: reading %s: %w", root, err)
	}
	// Hard links: in the layer's order, the first path of an inode keeps
	// the content and the later ones name it.
	sort.SliceStable(files, func(i, j int) bool { return pathLess(files[i].Path, files[j].Path) })
	first := map[inode]string{}
	for i, f := range files {
		if f.Dir || f.Link != "" {
			continue
		}
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(f.Path, "/"))))
		if err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || st.Nlink < 2 {
			continue
		}
		key := inode{uint64(st.Dev), st.Ino}
		if p, ok := first[key]; ok {
			files[i].Data, files[i].HardLink = nil, path.Clean(p)
			continue
		}
		first[key] = f.Path
	}
	return files, nil
}

// modeBits is a tar header's mode for an fs.FileMode: permissions plus
// the setuid, setgid and sticky bits.
func modeBits(m fs.FileMode) int64 {
	bits := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}
