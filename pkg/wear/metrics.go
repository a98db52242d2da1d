// Package wear exposes what edgeplane costs the host's flash storage: the
// bytes the process has written and the datastore's size on disk, as metrics
// on the API server's /metrics.
package wear

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var registerOnce sync.Once

// collector reads both figures at scrape time; nothing runs in between.
type collector struct {
	metrics.BaseStableCollector
	dbDir            string
	written, dbBytes *metrics.Desc
}

func newCollector(dbDir string) *collector {
	return &collector{
		dbDir: dbDir,
		written: metrics.NewDesc("edgeplane_process_disk_written_bytes_total",
			"Bytes this process has caused to be written to storage (write_bytes of /proc/self/io).",
			nil, nil, metrics.ALPHA, ""),
		dbBytes: metrics.NewDesc("edgeplane_datastore_size_bytes",
			"Size on disk of the datastore's files (database, WAL, etcd member directory).",
			nil, nil, metrics.ALPHA, ""),
	}
}

var _ metrics.StableCollector = (*collector)(nil)

// Register adds the collector for the datastore under dbDir to the legacy
// registry that the API server serves. Only the first call in a process counts.
func Register(dbDir string) {
	registerOnce.Do(func() {
		legacyregistry.CustomMustRegister(newCollector(dbDir))
	})
}

func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- c.written
	ch <- c.dbBytes
}

func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	if n, err := WrittenBytes(); err == nil {
		ch <- metrics.NewLazyConstMetric(c.written, metrics.CounterValue, float64(n))
	}
	if n, err := DirSize(c.dbDir); err == nil {
		ch <- metrics.NewLazyConstMetric(c.dbBytes, metrics.GaugeValue, float64(n))
	}
}

// WrittenBytes is write_bytes from /proc/self/io: bytes this process sent to
// the block layer (page cache write-back included), which is what wears flash.
func WrittenBytes() (uint64, error) {
	return procIOField("/proc/self/io", "write_bytes")
}

func procIOField(path, field string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	prefix := []byte(field + ":")
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), prefix); ok {
			return strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
		}
	}
	return 0, fs.ErrNotExist
}

// DirSize is the allocated size of the regular files under dir (sparse or
// preallocated files count for what they occupy, as etcd's WAL does).
func DirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		total += allocated(info)
		return nil
	})
	return total, err
}
