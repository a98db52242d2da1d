package apicache

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// The cache on disk is one file, a journal of batches: each flush appends
// one batch (the records of what changed since the last) and fsyncs it;
// when the file holds more than twice what is live, it is rewritten whole
// (a temp file, fsync, rename). A batch is an 8-byte header, the length and
// the CRC-32C of its payload, then the payload, one JSON record a line.
//
// On load: a last batch cut short (a power cut during its write) is
// dropped, what came before is kept; anything else that does not read back
// (a bad checksum followed by more data, a record that does not decode)
// makes the whole file untrusted: it is discarded and never served.
const (
	// FileName is the journal's name in the cache's directory.
	FileName    = "cache.journal"
	batchHeader = 8
	// maxBatch bounds one batch read back (a corrupt length).
	maxBatch = 256 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// record is one change: an object put or deleted, a list's state put or
// deleted, a token response put or deleted.
type record struct {
	Op string `json:"op"` // o, do, l, dl, t, dt
	K  string `json:"k"`
	// V is the object or token response (o, t), or the list (l).
	V json.RawMessage `json:"v,omitempty"`
}

// listRecord is a list's state on disk.
type listRecord struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	RV         string   `json:"rv"`
	Members    []string `json:"members"`
}

// errCorrupt marks a journal that cannot be trusted.
var errCorrupt = errors.New("corrupt")

// readJournal reads path's records. torn reports a last batch cut short
// (dropped). A missing file is no records.
func readJournal(path string) (recs []record, size int64, torn bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	off := 0
	for off < len(data) {
		if len(data)-off < batchHeader {
			return recs, int64(off), true, nil
		}
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n > maxBatch {
			return nil, 0, false, fmt.Errorf("%w: a batch at byte %d claims %d bytes", errCorrupt, off, n)
		}
		end := off + batchHeader + n
		if end > len(data) {
			return recs, int64(off), true, nil
		}
		payload := data[off+batchHeader : end]
		if crc32.Checksum(payload, crcTable) != sum {
			if end == len(data) {
				// The last batch, its bytes not all written.
				return recs, int64(off), true, nil
			}
			return nil, 0, false, fmt.Errorf("%w: the batch at byte %d fails its checksum", errCorrupt, off)
		}
		dec := json.NewDecoder(bytes.NewReader(payload))
		for {
			var r record
			if err := dec.Decode(&r); err == io.EOF {
				break
			} else if err != nil {
				return nil, 0, false, fmt.Errorf("%w: the batch at byte %d: %v", errCorrupt, off, err)
			}
			recs = append(recs, r)
		}
		off = end
	}
	return recs, int64(off), false, nil
}

// encodeBatch is recs as one batch.
func encodeBatch(recs []record) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(make([]byte, batchHeader))
	enc := json.NewEncoder(&buf)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return nil, err
		}
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b, uint32(len(b)-batchHeader))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[batchHeader:], crcTable))
	return b, nil
}

// journal appends batches to the file at path.
type journal struct {
	path string
	f    *os.File
	size int64
}

// openJournal opens path for appending at size (what readJournal kept: a
// torn tail is cut off first).
func openJournal(path string, size int64) (*journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		return nil, err
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &journal{path: path, f: f, size: size}, nil
}

// append writes recs as one batch and fsyncs it. The bytes written are
// returned.
func (j *journal) append(recs []record) (int, error) {
	b, err := encodeBatch(recs)
	if err != nil {
		return 0, err
	}
	if _, err := j.f.Write(b); err != nil {
		return 0, err
	}
	if err := j.f.Sync(); err != nil {
		return 0, err
	}
	j.size += int64(len(b))
	return len(b), nil
}

// rewrite replaces the file with one batch of recs (the live state), by
// rename: a power cut leaves the old file or the new.
func (j *journal) rewrite(recs []record) (int, error) {
	b, err := encodeBatch(recs)
	if err != nil {
		return 0, err
	}
	if _, err := atomicfile.Write(j.path, b, 0o600); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(j.path, os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	_ = j.f.Close()
	j.f, j.size = f, int64(len(b))
	return len(b), nil
}

func (j *journal) close() error { return j.f.Close() }

// discard removes an untrusted journal.
func discard(dir string) error {
	err := os.Remove(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
