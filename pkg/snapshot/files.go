// Package snapshot saves and restores the datastore of a data dir: SQLite with
// VACUUM INTO (a consistent copy taken while kine keeps writing), etcd with
// its snapshot API, and restores both (etcd with etcdutl's restore). It also
// names, lists and prunes the snapshot files, and schedules snapshots in the
// server.
package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

const (
	// ScheduledName is the name prefix of scheduled snapshots; only these
	// are pruned.
	ScheduledName = "scheduled"
	// OnDemandName is the default name prefix of `edgeplane snapshot save`.
	OnDemandName = "on-demand"

	timestampFormat = "20060102T150405Z"
	fileMode        = 0o600
	dirMode         = 0o700
)

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateName checks a --name value.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("snapshot name %q: use lower-case letters, digits and '-' (at most 63)", name)
	}
	return nil
}

// Dir is where a data dir keeps its snapshots.
func Dir(dataDir string) string { return filepath.Join(dataDir, "snapshots") }

// fileName is <name>-<kind>-<UTC time>.db.
func fileName(name, kind string, at time.Time) string {
	return fmt.Sprintf("%s-%s-%s.db", name, kind, at.UTC().Format(timestampFormat))
}

// File is a snapshot on disk.
type File struct {
	Path string
	Name string // the name prefix, e.g. "scheduled"
	Kind string // rawstore.SQLite or rawstore.Etcd
	Time time.Time
	Size int64
}

var filePattern = regexp.MustCompile(`^(.+)-(sqlite|etcd)-(\d{8}T\d{6}Z)\.db$`)

// List returns the snapshots in dir, oldest first. Files not named like
// snapshots are ignored.
func List(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var out []File
	for _, e := range entries {
		m := filePattern.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		at, err := time.Parse(timestampFormat, m[3])
		if err != nil {
			continue
		}
		f := File{Path: filepath.Join(dir, e.Name()), Name: m[1], Kind: m[2], Time: at}
		if fi, err := e.Info(); err == nil {
			f.Size = fi.Size()
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b File) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out, nil
}

// Prune removes the oldest snapshots named name in dir beyond the newest
// keep, and returns the paths it removed.
func Prune(dir, name string, keep int) ([]string, error) {
	files, err := List(dir)
	if err != nil {
		return nil, err
	}
	var mine []File
	for _, f := range files {
		if f.Name == name {
			mine = append(mine, f)
		}
	}
	var removed []string
	for len(mine) > keep {
		if err := os.Remove(mine[0].Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("snapshot: prune: %w", err)
		}
		removed = append(removed, mine[0].Path)
		mine = mine[1:]
	}
	return removed, nil
}

// bboltMagic starts the meta page of a bbolt file, which an etcd snapshot is.
const bboltMagic = 0xED0CDAED

// DetectKind tells whether the file at path is a SQLite or an etcd snapshot.
func DetectKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	head := make([]byte, 32)
	if _, err := io.ReadFull(f, head); err != nil {
		return "", fmt.Errorf("snapshot: %s is too short to be a snapshot", path)
	}
	switch {
	case bytes.HasPrefix(head, []byte("SQLite format 3\x00")):
		return rawstore.SQLite, nil
	// bbolt page header (16 bytes), then the meta's magic, host byte order.
	case binary.LittleEndian.Uint32(head[16:20]) == bboltMagic, binary.BigEndian.Uint32(head[16:20]) == bboltMagic:
		return rawstore.Etcd, nil
	}
	return "", fmt.Errorf("snapshot: %s is neither a SQLite database nor an etcd snapshot", path)
}

// publish moves the finished temporary file tmp to path without replacing an
// existing file, and syncs the directory.
func publish(tmp, path string) error {
	if err := os.Link(tmp, path); err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("snapshot: %s already exists", path)
		}
		return fmt.Errorf("snapshot: %w", err)
	}
	_ = os.Remove(tmp)
	return syncDir(filepath.Dir(path))
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	if err := f.Chmod(fileMode); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer d.Close()
	return d.Sync()
}
