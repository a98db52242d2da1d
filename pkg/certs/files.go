package certs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-logr/logr"
)

const (
	dirMode  os.FileMode = 0o700
	keyMode  os.FileMode = 0o600
	certMode os.FileMode = 0o644
)

// causeOf strips the path from *fs.PathError so messages name a file once.
func causeOf(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readOptional reads path. A missing file yields (nil, nil); any other
// failure (permission, a directory in its place, I/O) is an error naming it.
func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return nil, fmt.Errorf("tls: cannot read %s: %v", path, causeOf(err))
}

// ensureDir creates dir with mode 0700 if needed. With tighten, it also
// restricts an existing directory that is accessible to group or others.
func ensureDir(dir string, tighten bool) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("tls: %s exists but is not a directory: move it away or choose another data directory", dir)
	case err == nil:
		if tighten && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(dir, dirMode); err != nil {
				return fmt.Errorf("tls: cannot restrict directory %s to mode 0700: %v", dir, causeOf(err))
			}
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("tls: cannot use directory %s: %v", dir, causeOf(err))
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("tls: cannot create directory %s: %v (is the data directory writable?)", dir, causeOf(err))
	}
	return nil
}

// writeAtomic replaces path with data: it writes a temporary file in the same
// directory, fsyncs it, renames it over path and fsyncs the directory, so a
// crash leaves either the old or the new content, never a torn file.
func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("tls: cannot write to directory %s: %v (is the data directory writable?)", dir, causeOf(err))
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("tls: cannot set mode of %s: %v", tmp, causeOf(err))
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("tls: cannot write %s: %v", tmp, causeOf(err))
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("tls: cannot sync %s: %v", tmp, causeOf(err))
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("tls: cannot close %s: %v", tmp, causeOf(err))
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tls: cannot replace %s: %v", path, causeOf(err))
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("tls: cannot open directory %s to sync it: %v", dir, causeOf(err))
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("tls: cannot sync directory %s: %v", dir, causeOf(err))
	}
	return nil
}

// fileOp is one pending change to the disk. Ensure computes every change in
// memory first and performs them only once all inputs have been validated.
type fileOp struct {
	path string
	data []byte // nil: only chmod to mode
	mode os.FileMode
	why  string // for logging
	// created is true when path did not exist; such a file is removed again
	// if a later op of the same group fails.
	created bool
}

// journalSuffix names the journal of a group that creates files: it lists
// them and exists only while the group is being written, so that a crash
// (SIGKILL, power loss) in the middle is rolled back by the next Ensure like
// a failed write is (see recoverInterrupted).
const journalSuffix = ".creating"

// applyGroup performs ops in order. If one fails, files the group created
// are removed so that, for example, a new CA never remains half-written; if
// the process dies instead, the group's journal has the next Ensure do it.
func applyGroup(ops []fileOp) error {
	var created []string
	for _, op := range ops {
		if op.created {
			created = append(created, op.path)
		}
	}
	if len(created) > 0 {
		journal := filepath.Join(filepath.Dir(created[0]), "."+filepath.Base(created[0])+journalSuffix)
		if err := writeAtomic(journal, []byte(strings.Join(created, "\n")+"\n"), keyMode); err != nil {
			return err
		}
		defer func() {
			if err := os.Remove(journal); err == nil {
				_ = syncDir(filepath.Dir(journal))
			}
		}()
	}
	for i, op := range ops {
		var err error
		if op.data == nil {
			if err = os.Chmod(op.path, op.mode); err != nil {
				err = fmt.Errorf("tls: cannot set mode %#o on %s: %v", op.mode, op.path, causeOf(err))
			}
		} else {
			err = writeAtomic(op.path, op.data, op.mode)
		}
		if err != nil {
			for _, done := range ops[:i] {
				if done.created {
					_ = os.Remove(done.path)
				}
			}
			return err
		}
	}
	return nil
}

// modeOf returns the permission bits of path, or ok=false if it cannot be stat'ed.
func modeOf(path string) (os.FileMode, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	return fi.Mode().Perm(), true
}

// recoverInterrupted rolls back the groups whose writing a crash interrupted:
// it removes the files their journals list (only within dirs) and the
// journals. Nothing outside Ensure has used such files yet: a group's files
// are published only once all of them are written, and groups that depend on
// it (the leaves a new CA signs) are written after it.
func recoverInterrupted(log logr.Logger, dirs ...string) error {
	for i := range dirs {
		dirs[i] = filepath.Clean(dirs[i])
	}
	for _, dir := range dirs {
		journals, err := filepath.Glob(filepath.Join(dir, ".*"+journalSuffix))
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		for _, journal := range journals {
			data, err := os.ReadFile(journal)
			if err != nil {
				return fmt.Errorf("tls: cannot read %s: %v", journal, causeOf(err))
			}
			for _, path := range strings.Fields(string(data)) {
				if !slices.Contains(dirs, filepath.Dir(path)) {
					continue
				}
				log.Info("Removing a file of an interrupted certificate write", "path", path, "journal", journal)
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("tls: cannot remove %s (left by an interrupted write): %v", path, causeOf(err))
				}
			}
			if err := os.Remove(journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("tls: cannot remove %s: %v", journal, causeOf(err))
			}
			if err := syncDir(dir); err != nil {
				return err
			}
		}
	}
	return nil
}
