package apicache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func podJSON(name, rv, ip string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"default","resourceVersion":%q},"status":{"podIP":%q}}`, name, rv, ip))
}

const podsOfNode = "api/v1|pods||l=|f=spec.nodeName=node-a"

func podKey(name string) string { return objectKey("api/v1", "pods", "default", name) }

// fill puts a list of two pods in s and flushes it.
func fill(t *testing.T, logger klog.Logger, s *store) {
	t.Helper()
	s.putList(logger, podsOfNode, "v1", "PodList", "10", []item{
		{key: podKey("a"), raw: podJSON("a", "5", "10.42.0.5")},
		{key: podKey("b"), raw: podJSON("b", "6", "10.42.0.6")},
	})
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
}

// TestJournalReadBack: what was flushed reads back; a last batch cut short
// is dropped and the rest kept; anything else that does not read back
// discards the whole cache with one log line, and nothing of it is served.
func TestJournalReadBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage changes the journal after two flushes (the second an
		// event on pod b).
		damage    func(t *testing.T, path string)
		wantPods  int    // pods in the list after reopening; -1: no list
		wantIP    string // pod b's address
		wantLog   string
		wantFiles bool // the journal still exists
	}{
		{name: "intact", damage: func(*testing.T, string) {}, wantPods: 2, wantIP: "10.42.0.77", wantFiles: true},
		{name: "last batch cut short", damage: func(t *testing.T, path string) { truncateBy(t, path, 5) },
			wantPods: 2, wantIP: "10.42.0.6", wantLog: "last write was cut short", wantFiles: true},
		{name: "last batch's header only", damage: func(t *testing.T, path string) { appendBytes(t, path, []byte{1, 2, 3}) },
			wantPods: 2, wantIP: "10.42.0.77", wantLog: "last write was cut short", wantFiles: true},
		{name: "a flipped byte in the first batch", damage: func(t *testing.T, path string) { flip(t, path, batchHeader+20) },
			wantPods: -1, wantLog: "Discarding the node's API cache"},
		{name: "garbage", damage: func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 100), 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantPods: -1, wantLog: "Discarding the node's API cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logger, _ := ktesting.NewTestContext(t)
			s, err := openStore(logger, dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			fill(t, logger, s)
			s.event(logger, podsOfNode, item{key: podKey("b"), raw: podJSON("b", "12", "10.42.0.77")}, true, "12")
			if err := s.close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, FileName)
			tc.damage(t, path)

			var logs strings.Builder
			s, err = openStore(bufLogger(&logs), dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			_, _, _, items, ok := s.listed(podsOfNode)
			switch {
			case tc.wantPods < 0 && ok:
				t.Fatalf("a damaged cache served %d pods", len(items))
			case tc.wantPods >= 0 && (!ok || len(items) != tc.wantPods):
				t.Fatalf("got %d pods (list kept: %v), want %d", len(items), ok, tc.wantPods)
			}
			if tc.wantIP != "" {
				raw, _ := s.get(podKey("b"))
				if !strings.Contains(string(raw), tc.wantIP) {
					t.Errorf("pod b: %s, want address %s", raw, tc.wantIP)
				}
			}
			if got := strings.Count(logs.String(), "\n"); tc.wantLog != "" && (got != 1 || !strings.Contains(logs.String(), tc.wantLog)) {
				t.Errorf("log %q: want one line with %q", logs.String(), tc.wantLog)
			} else if tc.wantLog == "" && got != 0 {
				t.Errorf("log %q, want none", logs.String())
			}
			if _, err := os.Stat(path); (err == nil) != tc.wantFiles && tc.wantFiles {
				t.Errorf("journal: %v", err)
			}
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("the cache's directory: %v, mode %v; want 0700", err, fi.Mode().Perm())
			}
			if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != 0o600 {
				t.Errorf("the journal's mode %v, want 0600", fi.Mode().Perm())
			}
		})
	}
}

// TestWritesOnlyChanges: a list read again unchanged, an event that
// changes nothing and bookmarks write nothing; a change writes about its
// own size, not the cache's.
func TestWritesOnlyChanges(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	s, err := openStore(logger, t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	fill(t, logger, s)
	_, before := s.stats()
	s.putList(logger, podsOfNode, "v1", "PodList", "10", []item{
		{key: podKey("a"), raw: podJSON("a", "5", "10.42.0.5")},
		{key: podKey("b"), raw: podJSON("b", "6", "10.42.0.6")},
	})
	s.event(logger, podsOfNode, item{key: podKey("a"), raw: podJSON("a", "5", "10.42.0.5")}, true, "11")
	s.bookmark(podsOfNode, "20")
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	if _, after := s.stats(); after != before {
		t.Fatalf("nothing changed, yet %d bytes were written", after-before)
	}
	s.event(logger, podsOfNode, item{key: podKey("a"), raw: podJSON("a", "21", "10.42.0.9")}, true, "21")
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	_, after := s.stats()
	if one := int64(len(podJSON("a", "21", "10.42.0.9"))); after-before > one+100 {
		t.Fatalf("one pod changed (%d bytes): %d bytes written", one, after-before)
	}
}

// TestBound: a list that does not fit is not kept (never served partly).
func TestBound(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	s, err := openStore(logger, t.TempDir(), int64(len(podJSON("a", "5", "10.42.0.5"))+10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	fill(t, logger, s)
	if _, _, _, items, ok := s.listed(podsOfNode); ok {
		t.Fatalf("a list over the bound is kept with %d of its 2 pods", len(items))
	}
	if held, _ := s.stats(); held != 0 {
		t.Fatalf("%d bytes held for a list not kept", held)
	}
}

// TestCompaction: a journal that grew past twice what is live is rewritten
// to what is live, and reads back the same.
func TestCompaction(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	dir := t.TempDir()
	s, err := openStore(logger, dir, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, logger, s)
	big := strings.Repeat("x", 64<<10)
	for i := range 40 {
		s.event(logger, podsOfNode, item{key: podKey("a"), raw: podJSON("a", fmt.Sprint(100+i), big)}, true, "")
		if err := s.flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 2*(64<<10)+1<<20+64<<10 {
		t.Fatalf("the journal holds %d bytes for ~%d live", fi.Size(), 64<<10)
	}
	s, err = openStore(logger, dir, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	raw, _ := s.get(podKey("a"))
	if objectRV(raw) != 139 {
		t.Fatalf("after compaction pod a is at resourceVersion %d, want 139", objectRV(raw))
	}
}

func truncateBy(t *testing.T, path string, n int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func flip(t *testing.T, path string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// bufLogger logs to b, one line a message.
func bufLogger(b *strings.Builder) klog.Logger {
	return funcr.New(func(prefix, args string) { b.WriteString(prefix + args + "\n") }, funcr.Options{})
}
