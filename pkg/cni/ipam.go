package cni

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	netutils "k8s.io/utils/net"
)

// LegacyIPAMDataDir is host-local's default state directory, which the
// configuration of earlier edgeplane versions left it: one directory per
// network name for the whole host, so two nodes on one host shared it.
const LegacyIPAMDataDir = "/var/lib/cni/networks"

// AdoptAllocations moves host-local's reservations of addresses in cidrs
// from legacy/<network> into dataDir/<network>, so that a node whose
// configuration moves to a state directory of its own does not hand out
// an address a running pod got under the previous configuration. A pod
// deleted later is released in dataDir (the runtime runs DEL with the
// present configuration). Reservations of other ranges (another node on
// the same host) and host-local's last_reserved_ip files stay. Each file
// moves under host-local's lock of both directories; an address reserved
// in both (handed out twice already) is left in legacy and returned in
// conflicts. It returns the addresses it moved.
func AdoptAllocations(legacy, dataDir, network string, cidrs []string) (moved, conflicts []string, err error) {
	from, to := filepath.Join(legacy, network), filepath.Join(dataDir, network)
	if filepath.Clean(from) == filepath.Clean(to) {
		return nil, nil, nil
	}
	entries, err := os.ReadDir(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cni: reading the previous IPAM state %s: %w", from, err)
	}
	var mine []string
	for _, e := range entries {
		if e.Type().IsRegular() && inCIDRs(e.Name(), cidrs) {
			mine = append(mine, e.Name())
		}
	}
	if len(mine) == 0 {
		return nil, nil, nil
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return nil, nil, fmt.Errorf("cni: %w", err)
	}
	unlockFrom, err := lockStore(from)
	if err != nil {
		return nil, nil, err
	}
	defer unlockFrom()
	unlockTo, err := lockStore(to)
	if err != nil {
		return nil, nil, err
	}
	defer unlockTo()
	for _, name := range mine {
		src, dst := filepath.Join(from, name), filepath.Join(to, name)
		data, err := os.ReadFile(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released before the lock
		}
		if err != nil {
			return moved, conflicts, fmt.Errorf("cni: %w", err)
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			if have, rerr := os.ReadFile(dst); rerr == nil && bytes.Equal(have, data) {
				_ = os.Remove(src) // moved before, its removal interrupted
			} else {
				conflicts = append(conflicts, name)
			}
			continue
		}
		if err != nil {
			return moved, conflicts, fmt.Errorf("cni: %w", err)
		}
		_, werr := f.Write(data)
		if serr := f.Sync(); werr == nil {
			werr = serr
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			_ = os.Remove(dst)
			return moved, conflicts, fmt.Errorf("cni: writing %s: %w", dst, werr)
		}
		if err := os.Remove(src); err != nil {
			return moved, conflicts, fmt.Errorf("cni: %w", err)
		}
		moved = append(moved, name)
	}
	return moved, conflicts, nil
}

// inCIDRs tells whether name, a file name in host-local's state, is an
// address in one of cidrs.
func inCIDRs(name string, cidrs []string) bool {
	ip := netutils.ParseIPSloppy(name)
	if ip == nil {
		return false
	}
	for _, s := range cidrs {
		if _, n, err := netutils.ParseCIDRSloppy(s); err == nil && n.Contains(ip) {
			return true
		}
	}
	return false
}

// lockStore takes host-local's lock of its state directory dir (flock of
// dir/lock, as the plugin's disk store takes it).
func lockStore(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cni: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("cni: locking %s: %w", f.Name(), err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
