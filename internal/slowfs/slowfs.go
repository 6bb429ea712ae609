// Package slowfs is a slow disk for tests: it mounts a directory again,
// through FUSE, with a delay added to every fsync and fdatasync of a file.
// Everything else passes straight through to the directory underneath.
//
// The kernel here has no device-mapper (so no dm-delay), but it has FUSE,
// and as root a FUSE file system mounts without fusermount. The file
// system is served by the process that mounts it, so a process under test
// that writes through the mount (a sqlkube server started by the test)
// waits for the delay exactly where a slow disk would make it wait: in
// fsync, which is where SQLite's synchronous=FULL commit waits.
package slowfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mount is a mounted slow directory.
type Mount struct {
	// Dir is where the slow view of the backing directory is mounted.
	Dir string

	server *fuse.Server
	delay  atomic.Int64 // nanoseconds added to each fsync
	syncs  atomic.Int64 // fsyncs served
	waited atomic.Int64 // nanoseconds spent in the added delay
}

// New mounts backing at mountpoint (an existing empty directory) with
// delay added to every fsync. Unmount ends it. It needs root.
func New(backing, mountpoint string, delay time.Duration) (*Mount, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("slowfs: mounting FUSE without fusermount needs root")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("slowfs: %w", err)
	}
	m := &Mount{Dir: mountpoint}
	m.delay.Store(int64(delay))
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, m: m}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	server, err := fs.Mount(mountpoint, root.RootNode, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:      "slowfs",
			Name:        "slowfs",
			DirectMount: true, // mount(2) as root; there is no fusermount
			// DirectMountStrict: fail instead of falling back to
			// fusermount, whose absence would only confuse the error.
			DirectMountStrict: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("slowfs: mount %s: %w", mountpoint, err)
	}
	m.server = server
	return m, nil
}

// SetDelay changes the delay added to later fsyncs.
func (m *Mount) SetDelay(d time.Duration) { m.delay.Store(int64(d)) }

// Syncs is how many fsyncs the mount has served, and the time they spent
// in the added delay.
func (m *Mount) Syncs() (n int64, delayed time.Duration) {
	return m.syncs.Load(), time.Duration(m.waited.Load())
}

// Unmount unmounts the directory and stops serving it. Whoever used it
// must have stopped: the kernel refuses to unmount a busy mount.
func (m *Mount) Unmount() error {
	return m.server.Unmount()
}

// node is a loopback node whose files fsync slowly.
type node struct {
	fs.LoopbackNode
	m *Mount
}

var (
	_ fs.NodeOpener  = (*node)(nil)
	_ fs.NodeCreater = (*node)(nil)
)

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	return n.m.wrap(fh), fuseFlags, errno
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	inode, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return inode, n.m.wrap(fh), fuseFlags, errno
}

// wrap gives a loopback file a slow fsync. The file keeps every other
// method of the loopback file (read, write, locks, allocate, lseek), which
// go-fuse finds by type assertion, so the wrapper embeds the concrete type.
func (m *Mount) wrap(fh fs.FileHandle) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh
	}
	return &file{LoopbackFile: lf, m: m}
}

type file struct {
	*fs.LoopbackFile
	m *Mount
}

var _ fs.FileFsyncer = (*file)(nil)

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if d := time.Duration(f.m.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done(): // the caller was interrupted
			t.Stop()
			return syscall.EINTR
		}
		f.m.waited.Add(int64(d))
	}
	f.m.syncs.Add(1)
	return f.LoopbackFile.Fsync(ctx, flags)
}
