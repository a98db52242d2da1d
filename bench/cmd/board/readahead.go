package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// defaultReadAheadKB is a board's read-ahead: Linux's default for a block
// device that states no optimal I/O size (VM_READAHEAD_PAGES, 128 KiB), as
// an SD card or eMMC. A page fault in a file mapping reads about this much
// around the page (the mmap read-around) while the mapping is not marked
// random, so it sets how much of the binary one fault brings in. Virtual
// disks often state a larger one: this project's reference host reads 8 MiB
// around each fault, and at 256 MiB edgeplane thrashed there (every fault
// read ~1.8 MiB back into the limit) where with 128 KiB it started in 10 s.
const defaultReadAheadKB = 128

// readAheadDisk holds a copy of the edgeplane binary on an ext4 filesystem
// of its own, on a loop device whose read-ahead is set, so that page faults
// in the binary read what they would on a board whatever the host's disk.
// The loop device reads its image with direct I/O: the image's pages are
// not cached a second time (and charged to the reader's cgroup) below the
// filesystem's.
type readAheadDisk struct {
	dir, loop, mnt string
	// bin is the binary's copy on the filesystem.
	bin string
}

// newReadAheadDisk makes the filesystem, sets the loop device's read-ahead
// to kb and copies bin onto it. Close removes everything.
func newReadAheadDisk(bin string, kb int) (_ *readAheadDisk, err error) {
	fi, err := os.Stat(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "board-disk-")
	if err != nil {
		return nil, err
	}
	d := &readAheadDisk{dir: dir, mnt: filepath.Join(dir, "mnt")}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close())
		}
	}()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return nil, err
	}
	// Whole MiB: a loop device reads whole 512-byte sectors.
	if err := os.Truncate(img, (fi.Size()>>20+65)<<20); err != nil {
		return nil, err
	}
	if err := run("mkfs.ext4", "-q", "-F", img); err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd := exec.Command("losetup", "--find", "--show", "--direct-io=on", img)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("losetup: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	d.loop = strings.TrimSpace(string(out))
	ra := filepath.Join("/sys/block", filepath.Base(d.loop), "queue", "read_ahead_kb")
	if err := os.WriteFile(ra, []byte(strconv.Itoa(kb)), 0o644); err != nil {
		return nil, fmt.Errorf("setting the loop device's read-ahead: %w", err)
	}
	if err := os.Mkdir(d.mnt, 0o700); err != nil {
		return nil, err
	}
	if err := run("mount", "-t", "ext4", d.loop, d.mnt); err != nil {
		return nil, err
	}
	d.bin = filepath.Join(d.mnt, "edgeplane")
	if err := copyFile(bin, d.bin); err != nil {
		return nil, err
	}
	return d, nil
}

// Close unmounts the filesystem, detaches the loop device and removes the
// image.
func (d *readAheadDisk) Close() error {
	var errs []error
	if d.bin != "" {
		if err := unix.Unmount(d.mnt, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", d.mnt, err))
		}
	}
	if d.loop != "" {
		if err := run("losetup", "-d", d.loop); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.RemoveAll(d.dir))
	}
	return errors.Join(errs...)
}

// hostReadAheadKB is the read-ahead of the block device holding path (-1
// when it cannot be read: a filesystem without one, as tmpfs or overlay).
func hostReadAheadKB(path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return -1
	}
	dev := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, p := range []string{dev + "/queue/read_ahead_kb", dev + "/../queue/read_ahead_kb"} {
		if b, err := os.ReadFile(p); err == nil {
			if kb, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return kb
			}
		}
	}
	return -1
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}
