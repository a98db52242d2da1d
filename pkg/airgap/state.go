package airgap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/api/types"
	"k8s.io/klog/v2"
)

// state is the record of imported files, kept between runs.
type state struct {
	Files map[string]fileRecord `json:"files"`
}

// fileRecord is one imported file: what identifies its content, and the
// image records it made.
type fileRecord struct {
	Size    int64             `json:"size"`
	ModTime time.Time         `json:"modTime"`
	Digest  string            `json:"digest"`
	Images  map[string]target `json:"images"`
}

type target struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

func (t target) proto() *types.Descriptor {
	return &types.Descriptor{MediaType: t.MediaType, Digest: t.Digest, Size: t.Size}
}

// loadState reads the record; a missing or unreadable one means nothing was
// imported (every file is imported again, which is safe).
func loadState(ctx context.Context, path string) *state {
	st := &state{Files: map[string]fileRecord{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st
	}
	if err == nil {
		err = json.Unmarshal(b, st)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Ignoring the record of imported images; every image file is imported again", "file", path)
		return &state{Files: map[string]fileRecord{}}
	}
	if st.Files == nil {
		st.Files = map[string]fileRecord{}
	}
	return st
}

// save writes the record atomically (0600).
func (st *state) save(path string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("airgap: write the record of imported images: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("airgap: write the record of imported images %s: %w", path, err)
	}
	return nil
}
