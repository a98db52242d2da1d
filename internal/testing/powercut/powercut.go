// Package powercut is a FUSE filesystem for tests that simulates a power cut.
// It passes every operation through to a backing directory, and remembers,
// for each file, the durable image its data had at the last fsync (or
// fdatasync) of that file. Cut puts every file back to that image: data
// written and not yet synced is lost, the way the page cache of a real disk
// is lost when the power goes (what Jepsen's LazyFS does).
//
// What it models:
//   - file data and file size (write, mmap writeback, truncate, fallocate) are
//     volatile until the file is fsynced or fdatasynced; Cut restores the
//     synced bytes and the synced size;
//   - namespace changes (create, mkdir, rename, unlink, link, symlink) and
//     attributes (mode, owner, times) are durable at once, as on a filesystem
//     that journals metadata before data (ext4's data=ordered after a commit).
//     A directory fsync therefore succeeds and changes nothing. The classic
//     torn file is modelled exactly: write a temp file, rename it over the
//     target without fsync, cut: the target is empty (or short), neither the
//     old content nor the new. What is not modelled: a rename or a create
//     that is lost because its directory was not fsynced (real filesystems may
//     lose those too; this harness is lenient there).
//
// The backing directory is not synced itself: the harness simulates the disk,
// the host's durability does not matter to the test. After Cut every data
// operation fails with EIO (the machine is off); unmount, then mount again
// on the same backing directory to restart.
package powercut

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// blockSize is the granularity of the saved durable images.
const blockSize = 4096

// FS is one mounted power-cut filesystem.
type FS struct {
	backing, mountpoint string
	server              *fuse.Server

	mu    sync.Mutex
	files map[uint64]*volatile // by inode number, files with unsynced changes
	cut   bool
	stats Stats
}

// Stats counts what the filesystem saw; Cut fills the Dropped fields.
type Stats struct {
	Writes, Syncs        int      // data writes and file syncs seen
	DroppedFiles         int      // files that had unsynced changes at the cut
	DroppedBytesRestored int64    // bytes of durable images written back at the cut
	DroppedPaths         []string // backing paths of those files, relative to the backing directory
}

// volatile is a file with changes since its last sync: the durable size and
// the durable content of every block changed since then.
type volatile struct {
	f    *os.File // read-write handle on the backing inode
	size int64
	pre  map[int64][]byte
}

// Available reports why a test cannot mount the filesystem here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("powercut mounts FUSE itself (no fusermount on these hosts) and needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("powercut needs /dev/fuse: %w", err)
	}
	return nil
}

// Mount serves backing at mountpoint (both must be existing directories)
// until Unmount. It mounts directly (mount(2)), so it needs root.
func Mount(backing, mountpoint string) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	p := &FS{backing: backing, mountpoint: mountpoint, files: map[uint64]*volatile{}}
	lr, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("powercut: backing directory %s: %w", backing, err)
	}
	ln := lr.(*fs.LoopbackNode)
	root := &node{LoopbackNode: ln, pc: p}
	ln.RootData.RootNode = root
	p.server, err = fs.Mount(mountpoint, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            backing,
			Name:              "powercut",
			// EnableLocks stays off: the kernel keeps fcntl locks itself.
		},
	})
	if err != nil {
		return nil, fmt.Errorf("powercut: mount %s on %s: %w", backing, mountpoint, err)
	}
	return p, nil
}

// Mountpoint is where the filesystem is mounted.
func (p *FS) Mountpoint() string { return p.mountpoint }

// Cut simulates the power loss: every file goes back to its durable image,
// and every later data operation fails with EIO. Stop (SIGKILL) the
// processes that use the mount first.
func (p *FS) Cut() (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return p.stats, errors.New("powercut: already cut")
	}
	p.cut = true
	var errs []error
	for ino, v := range p.files {
		for b, data := range v.pre {
			if _, err := v.f.WriteAt(data, b*blockSize); err != nil {
				errs = append(errs, fmt.Errorf("restore inode %d block %d: %w", ino, b, err))
			}
			p.stats.DroppedBytesRestored += int64(len(data))
		}
		if err := v.f.Truncate(v.size); err != nil {
			errs = append(errs, fmt.Errorf("restore inode %d size %d: %w", ino, v.size, err))
		}
		if path, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", v.f.Fd())); err == nil {
			if rel, err := filepath.Rel(p.backing, path); err == nil {
				path = rel
			}
			p.stats.DroppedPaths = append(p.stats.DroppedPaths, path)
		}
		_ = v.f.Close()
		p.stats.DroppedFiles++
	}
	p.files = map[uint64]*volatile{}
	return p.stats, errors.Join(errs...)
}

// Stats returns the counters so far.
func (p *FS) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Unmount unmounts and stops serving; after a Cut, files the kernel still
// writes back fail. A busy mount is detached lazily.
func (p *FS) Unmount() error {
	err := p.server.Unmount()
	if err != nil {
		if derr := syscall.Unmount(p.mountpoint, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("powercut: unmount %s: %w (lazy unmount: %v)", p.mountpoint, err, derr)
		}
	}
	p.server.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.files {
		_ = v.f.Close()
	}
	p.files = map[uint64]*volatile{}
	return nil
}

// change records the durable image of [off, off+n) of inode ino before it is
// modified; open gives a read-write handle on the backing file. It must be
// called with p.mu held, and the change made before p.mu is released.
func (p *FS) change(ino uint64, off, n int64, open func() (*os.File, error)) syscall.Errno {
	if p.cut {
		return syscall.EIO
	}
	v := p.files[ino]
	if v == nil {
		f, err := open()
		if err != nil {
			return fs.ToErrno(err)
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return fs.ToErrno(err)
		}
		v = &volatile{f: f, size: st.Size(), pre: map[int64][]byte{}}
		p.files[ino] = v
	}
	end := min(off+n, v.size)
	for b := off / blockSize; b*blockSize < end; b++ {
		if _, ok := v.pre[b]; ok {
			continue
		}
		data := make([]byte, min(blockSize, v.size-b*blockSize))
		if _, err := v.f.ReadAt(data, b*blockSize); err != nil {
			return fs.ToErrno(err)
		}
		v.pre[b] = data
	}
	return 0
}

// sync makes inode ino's current content its durable image.
func (p *FS) sync(ino uint64) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return syscall.EIO
	}
	p.stats.Syncs++
	if v := p.files[ino]; v != nil {
		_ = v.f.Close()
		delete(p.files, ino)
	}
	return 0
}

// reopen opens a second, read-write handle on the inode behind fd.
func reopen(fd int) (*os.File, error) {
	return os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDWR, 0)
}

// node is a loopback node whose data changes go through the FS.
type node struct {
	*fs.LoopbackNode
	pc *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), pc: n.pc}
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &file{lf: fh.(*fs.LoopbackFile), ino: n.StableAttr().Ino, pc: n.pc}, fl, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, &file{lf: fh.(*fs.LoopbackFile), ino: ch.StableAttr().Ino, pc: n.pc}, fl, 0
}

// Tmpfile (O_TMPFILE) is refused: its handle would bypass the model, and
// callers fall back to a named temp file.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is refused for the same reason; callers fall back to copying.
func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Setattr records a size change as a data change; the rest is metadata.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var inner fs.FileHandle
	if pf, ok := f.(*file); ok {
		inner = pf.lf
	}
	sz, ok := in.GetSize()
	if !ok {
		return n.LoopbackNode.Setattr(ctx, inner, in, out)
	}
	root := n.LoopbackNode.RootData
	path := filepath.Join(root.Path, n.Path(root.RootNode.EmbeddedInode()))
	open := func() (*os.File, error) { return os.OpenFile(path, os.O_RDWR, 0) }
	if pf, ok := f.(*file); ok {
		open = pf.reopen
	}
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	if errno := n.pc.change(n.StableAttr().Ino, int64(sz), 1<<62, open); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Setattr(ctx, inner, in, out)
}

// Fsync of a file makes its content durable; of a directory it succeeds at
// once (namespace changes are durable when made).
func (n *node) Fsync(_ context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	if n.IsDir() {
		n.pc.mu.Lock()
		defer n.pc.mu.Unlock()
		if n.pc.cut {
			return syscall.EIO
		}
		return 0
	}
	return n.pc.sync(n.StableAttr().Ino)
}

// file is an open file; it has no PassthroughFd on purpose, so that the
// kernel sends every write here instead of to the backing file.
type file struct {
	lf  *fs.LoopbackFile
	ino uint64
	pc  *FS
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
	_ fs.FileStatxer   = (*file)(nil)
)

func (f *file) reopen() (*os.File, error) {
	fd, ok := f.lf.PassthroughFd()
	if !ok {
		return nil, syscall.EBADF
	}
	return reopen(fd)
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.pc.mu.Lock()
	defer f.pc.mu.Unlock()
	if errno := f.pc.change(f.ino, off, int64(len(data)), f.reopen); errno != 0 {
		return 0, errno
	}
	f.pc.stats.Writes++
	return f.lf.Write(ctx, data, off)
}

// Allocate: mode 0 and KEEP_SIZE leave the content alone (the size change
// is volatile); punching or zeroing a range changes it.
func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f.pc.mu.Lock()
	defer f.pc.mu.Unlock()
	n := int64(size)
	if mode&^fallocKeepSize == 0 {
		n = 0
	}
	if errno := f.pc.change(f.ino, int64(off), n, f.reopen); errno != 0 {
		return errno
	}
	return f.lf.Allocate(ctx, off, size, mode)
}

// fallocKeepSize is FALLOC_FL_KEEP_SIZE.
const fallocKeepSize = 0x1

func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }
func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.lf.Flush(ctx) }
func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}
func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

func (f *file) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return f.lf.Statx(ctx, flags, mask, out)
}
