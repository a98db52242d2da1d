package apicache

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"k8s.io/klog/v2"
)

// store is what the cache holds, in memory and in its journal: objects by
// key, the lists the node's parts asked for (by path and selectors) as sets
// of object keys, the objects asked for by name, and token responses.
// Objects are kept as the API server's JSON without their managedFields.
type store struct {
	dir string
	max int64

	mu      sync.Mutex
	objects map[string][]byte
	lists   map[string]*list
	gets    map[string]bool
	tokens  map[string][]byte
	size    int64
	maxRV   uint64
	pending []record
	full    bool // the bound was hit (logged once)
	journal *journal
	written int64 // bytes appended or rewritten since open
	// local are the resourceVersions the cache gave objects it changed
	// itself, the last maxLocalRVs of them.
	local map[uint64]bool
}

// maxLocalRVs bounds the resourceVersions of the cache's own kept: a
// client holding an older one lists again anyway after its watch's
// timeout (minutes) and thousands of pod status updates.
const maxLocalRVs = 4096

// list is one list's state.
type list struct {
	apiVersion, kind, rv string
	members              map[string]bool
}

func (l *list) record(key string) record {
	lr := listRecord{APIVersion: l.apiVersion, Kind: l.kind, RV: l.rv, Members: slices.Sorted(maps.Keys(l.members))}
	v, _ := json.Marshal(lr)
	return record{Op: "l", K: key, V: v}
}

// openStore loads the journal in dir. An untrusted journal is discarded with
// one log line; the cache starts empty.
func openStore(logger klog.Logger, dir string, max int64) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("api cache: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("api cache: %w", err)
	}
	s := &store{dir: dir, max: max, objects: map[string][]byte{}, lists: map[string]*list{}, gets: map[string]bool{}, tokens: map[string][]byte{}, local: map[uint64]bool{}}
	path := filepath.Join(dir, FileName)
	recs, size, torn, err := readJournal(path)
	if err == nil {
		err = s.replay(recs)
	}
	if err != nil {
		logger.Info("Discarding the node's API cache: it does not read back, nothing of it is served", "file", path, "err", err.Error())
		if err := discard(dir); err != nil {
			return nil, fmt.Errorf("api cache: %w", err)
		}
		s = &store{dir: dir, max: max, objects: map[string][]byte{}, lists: map[string]*list{}, gets: map[string]bool{}, tokens: map[string][]byte{}, local: map[uint64]bool{}}
		size = 0
	} else if torn {
		logger.Info("The node's API cache's last write was cut short: its changes are dropped, the rest is kept", "file", path)
	}
	if s.journal, err = openJournal(path, size); err != nil {
		return nil, fmt.Errorf("api cache: %w", err)
	}
	return s, nil
}

// replay applies the journal's records.
func (s *store) replay(recs []record) error {
	for _, r := range recs {
		switch r.Op {
		case "o":
			s.setObject(r.K, r.V)
		case "do":
			s.dropObject(r.K)
		case "l":
			var lr listRecord
			if err := json.Unmarshal(r.V, &lr); err != nil {
				return fmt.Errorf("%w: list %s: %v", errCorrupt, r.K, err)
			}
			l := &list{apiVersion: lr.APIVersion, kind: lr.Kind, rv: lr.RV, members: map[string]bool{}}
			for _, m := range lr.Members {
				l.members[m] = true
			}
			s.lists[r.K] = l
		case "dl":
			delete(s.lists, r.K)
		case "g":
			s.gets[r.K] = true
		case "dg":
			delete(s.gets, r.K)
		case "t":
			s.size += int64(len(r.V)) - int64(len(s.tokens[r.K]))
			s.tokens[r.K] = r.V
		case "dt":
			s.size -= int64(len(s.tokens[r.K]))
			delete(s.tokens, r.K)
		case "r":
			rv, err := strconv.ParseUint(r.K, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: a resourceVersion %q", errCorrupt, r.K)
			}
			s.addLocalLocked(rv)
		default:
			return fmt.Errorf("%w: a record of unknown kind %q", errCorrupt, r.Op)
		}
	}
	for k, l := range s.lists {
		for m := range l.members {
			if s.objects[m] == nil {
				return fmt.Errorf("%w: list %s names %s, which the cache does not hold", errCorrupt, k, m)
			}
		}
	}
	return nil
}

// setObject stores raw under key and tracks the size and the highest
// resourceVersion seen.
func (s *store) setObject(key string, raw []byte) {
	s.size += int64(len(raw)) - int64(len(s.objects[key]))
	s.objects[key] = raw
	if rv := objectRV(raw); rv > s.maxRV {
		s.maxRV = rv
	}
}

func (s *store) dropObject(key string) {
	s.size -= int64(len(s.objects[key]))
	delete(s.objects, key)
}

// putObjectLocked stores an object unless it holds it unchanged; false when
// the bound leaves no room for it.
func (s *store) putObjectLocked(logger klog.Logger, key string, raw []byte) bool {
	old, ok := s.objects[key]
	if ok && string(old) == string(raw) {
		return true
	}
	if s.size+int64(len(raw))-int64(len(old)) > s.max {
		if !s.full {
			s.full = true
			logger.Info("The node's API cache is full: what does not fit is not kept, and lists missing it are not served offline", "bound", s.max)
		}
		return false
	}
	s.setObject(key, raw)
	s.pending = append(s.pending, record{Op: "o", K: key, V: raw})
	return true
}

// referenced tells whether a list or a get still holds key.
func (s *store) referencedLocked(key string) bool {
	if s.gets[key] {
		return true
	}
	for _, l := range s.lists {
		if l.members[key] {
			return true
		}
	}
	return false
}

// collectLocked drops the objects in keys that nothing references.
func (s *store) collectLocked(keys ...string) {
	for _, k := range keys {
		if _, ok := s.objects[k]; ok && !s.referencedLocked(k) {
			s.dropObject(k)
			s.pending = append(s.pending, record{Op: "do", K: k})
		}
	}
}

// dropListLocked forgets a list (one that could not be kept whole).
func (s *store) dropListLocked(key string) {
	l := s.lists[key]
	if l == nil {
		return
	}
	delete(s.lists, key)
	s.pending = append(s.pending, record{Op: "dl", K: key})
	s.collectLocked(slices.Collect(maps.Keys(l.members))...)
}

// item is an object of a list or event, normalised.
type item struct {
	key string
	raw []byte
}

// putList makes items the whole of list key, as a LIST (or a watch's
// initial events) returned them at rv.
func (s *store) putList(logger klog.Logger, key, apiVersion, kind, rv string, items []item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.lists[key]
	l := &list{apiVersion: apiVersion, kind: kind, rv: rv, members: map[string]bool{}}
	for _, it := range items {
		if !s.putObjectLocked(logger, it.key, it.raw) {
			// Not kept whole: not kept at all.
			if old != nil {
				s.dropListLocked(key)
			}
			keys := make([]string, 0, len(items))
			for _, it := range items {
				keys = append(keys, it.key)
			}
			s.collectLocked(keys...)
			return
		}
		l.members[it.key] = true
	}
	changed := old == nil || old.apiVersion != apiVersion || old.kind != kind || !maps.Equal(old.members, l.members)
	s.lists[key] = l
	if changed || old.rv != rv {
		s.pending = append(s.pending, l.record(key))
	}
	if old != nil {
		var gone []string
		for m := range old.members {
			if !l.members[m] {
				gone = append(gone, m)
			}
		}
		s.collectLocked(gone...)
	}
}

// event applies a watch event of list key: the object added or changed
// (put), or gone from the list (put false). The list's resourceVersion
// moves with it in memory; it is written with the list's next change.
func (s *store) event(logger klog.Logger, key string, it item, put bool, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lists[key]
	if l == nil {
		return // a watch of a list never listed through the cache
	}
	if rv != "" {
		l.rv = rv
	}
	if !put {
		if l.members[it.key] {
			delete(l.members, it.key)
			s.pending = append(s.pending, l.record(key))
			s.collectLocked(it.key)
		}
		return
	}
	if !s.putObjectLocked(logger, it.key, it.raw) {
		s.dropListLocked(key)
		return
	}
	if !l.members[it.key] {
		l.members[it.key] = true
		s.pending = append(s.pending, l.record(key))
	}
}

// bookmark moves list key's resourceVersion (memory only).
func (s *store) bookmark(key, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lists[key]; l != nil && rv != "" {
		l.rv = rv
	}
}

// putGet keeps an object asked for by name.
func (s *store) putGet(logger klog.Logger, it item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.putObjectLocked(logger, it.key, it.raw) {
		return
	}
	if !s.gets[it.key] {
		s.gets[it.key] = true
		s.pending = append(s.pending, record{Op: "g", K: it.key})
	}
}

// forgetGet drops an object the server says is gone.
func (s *store) forgetGet(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gets[key] {
		delete(s.gets, key)
		s.pending = append(s.pending, record{Op: "dg", K: key})
		s.collectLocked(key)
	}
}

// get is a cached object.
func (s *store) get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, ok := s.objects[key]
	return raw, ok
}

// listed is list key's state and objects, sorted by key.
func (s *store) listed(key string) (apiVersion, kind, rv string, items []item, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lists[key]
	if l == nil {
		return "", "", "", nil, false
	}
	for _, m := range slices.Sorted(maps.Keys(l.members)) {
		items = append(items, item{key: m, raw: s.objects[m]})
	}
	return l.apiVersion, l.kind, l.rv, items, true
}

// listsHolding are the lists whose members include key.
func (s *store) listsHolding(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, l := range s.lists {
		if l.members[key] {
			out = append(out, k)
		}
	}
	return out
}

// putToken keeps a token response.
func (s *store) putToken(logger klog.Logger, key string, raw []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(s.tokens[key]) == string(raw) {
		return
	}
	if s.size+int64(len(raw)) > s.max {
		return
	}
	s.size += int64(len(raw)) - int64(len(s.tokens[key]))
	s.tokens[key] = raw
	s.pending = append(s.pending, record{Op: "t", K: key, V: raw})
}

func (s *store) token(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, ok := s.tokens[key]
	return raw, ok
}

// dropToken forgets an expired token response.
func (s *store) dropToken(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if raw, ok := s.tokens[key]; ok {
		s.size -= int64(len(raw))
		delete(s.tokens, key)
		s.pending = append(s.pending, record{Op: "dt", K: key})
	}
}

// localRV is a resourceVersion above every one the cache holds, for an
// object the cache changed itself (writeback.go).
func (s *store) localRV() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxRV++
	s.addLocalLocked(s.maxRV)
	rv := strconv.FormatUint(s.maxRV, 10)
	s.pending = append(s.pending, record{Op: "r", K: rv})
	return rv
}

func (s *store) addLocalLocked(rv uint64) {
	s.local[rv] = true
	if len(s.local) > maxLocalRVs {
		delete(s.local, slices.Min(slices.Collect(maps.Keys(s.local))))
	}
}

// isLocalRV tells whether rv is one the cache gave.
func (s *store) isLocalRV(rv uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local[rv]
}

// flush writes what changed since the last flush as one batch, or the
// whole state when the journal has grown past twice what is live.
func (s *store) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	var n int
	var err error
	if s.journal.size > 2*s.size+1<<20 {
		n, err = s.journal.rewrite(s.snapshotLocked())
	} else {
		n, err = s.journal.append(s.pending)
	}
	if err != nil {
		return fmt.Errorf("api cache: writing %s: %w", s.journal.path, err)
	}
	s.written += int64(n)
	s.pending = nil
	return nil
}

// snapshotLocked is the live state as records.
func (s *store) snapshotLocked() []record {
	var recs []record
	for _, k := range slices.Sorted(maps.Keys(s.objects)) {
		recs = append(recs, record{Op: "o", K: k, V: s.objects[k]})
	}
	for _, k := range slices.Sorted(maps.Keys(s.lists)) {
		recs = append(recs, s.lists[k].record(k))
	}
	for _, k := range slices.Sorted(maps.Keys(s.gets)) {
		recs = append(recs, record{Op: "g", K: k})
	}
	for _, k := range slices.Sorted(maps.Keys(s.tokens)) {
		recs = append(recs, record{Op: "t", K: k, V: s.tokens[k]})
	}
	for _, rv := range slices.Sorted(maps.Keys(s.local)) {
		recs = append(recs, record{Op: "r", K: strconv.FormatUint(rv, 10)})
	}
	return recs
}

// stats are the cache's figures: bytes held, bytes written to disk since
// it opened.
func (s *store) stats() (held, written int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size, s.written
}

func (s *store) close() error {
	err := s.flush()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cerr := s.journal.close(); err == nil {
		err = cerr
	}
	return err
}

// listKeys are the keys of the lists of resource.
func (s *store) listKeys(resource string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.lists {
		if _, r := resourceOfList(k); r == resource {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
