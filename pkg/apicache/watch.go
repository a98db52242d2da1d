package apicache

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// initialEventsEnd is the annotation of the bookmark that ends a watch's
// initial events (a watch list, sendInitialEvents=true).
const initialEventsEnd = "k8s.io/initial-events-end"

// event is a watch event as the cache reads it.
type event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watch forwards a watch and applies its events to the cache; offline, or
// when the server does not answer, it is held from the cache.
func (c *Cache) watch(w http.ResponseWriter, r *http.Request, q request, online bool) {
	logger := klog.FromContext(r.Context())
	if !online {
		c.holdWatch(w, r, q)
		return
	}
	if c.localResume(r) {
		// The client resumes from a resourceVersion the cache made up
		// offline: the server's events up to it would be missed. Gone:
		// the client lists again.
		status(w, http.StatusGone, "Expired", "the resourceVersion is the node's cache's own, from while no server answered: list again")
		return
	}
	resp, err := c.roundTrip(r, nil)
	if err != nil {
		if r.Context().Err() == nil {
			logger.V(4).Info("Watching through the API server failed: held from the cache", "path", r.URL.Path, "err", err.Error())
			c.holdWatch(w, r, q)
		}
		return
	}
	defer resp.Body.Close()
	copyHeaders(w, resp)
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	if resp.StatusCode != http.StatusOK {
		buf := make([]byte, 32<<10)
		n, _ := resp.Body.Read(buf)
		_, _ = w.Write(buf[:n])
		return
	}
	prefix, resource := resourceOfList(q.list)
	collecting := r.URL.Query().Get("sendInitialEvents") == "true"
	var initial []item
	dec := json.NewDecoder(resp.Body)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return // the server ended it, or its connection: the client watches again
		}
		if _, err := w.Write(append(raw, '\n')); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		var ev event
		if json.Unmarshal(raw, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "ADDED", "MODIFIED", "DELETED":
			norm, m, err := normalize(ev.Object, "", "")
			if err != nil {
				continue
			}
			it := item{key: objectKey(prefix, resource, m.Namespace, m.Name), raw: norm}
			if collecting {
				if ev.Type != "DELETED" {
					initial = append(initial, it)
				}
				continue
			}
			c.store.event(logger, q.list, it, ev.Type != "DELETED", m.ResourceVersion)
		case "BOOKMARK":
			var b struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					ResourceVersion string            `json:"resourceVersion"`
					Annotations     map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if json.Unmarshal(ev.Object, &b) != nil {
				continue
			}
			if collecting && b.Metadata.Annotations[initialEventsEnd] == "true" {
				c.store.putList(logger, q.list, b.APIVersion, b.Kind+"List", b.Metadata.ResourceVersion, initial)
				collecting, initial = false, nil
				continue
			}
			c.store.bookmark(q.list, b.Metadata.ResourceVersion)
		}
	}
}

// heldWatch is a watch held open offline; events are what the cache
// changed itself (writeback.go) for its list.
type heldWatch struct {
	list   string
	events chan []byte
}

// holdWatch answers a watch from the cache: the list's objects as initial
// events when asked for, then whatever the cache changes itself, until a
// server answers again, the client's timeout passes or it goes away.
func (c *Cache) holdWatch(w http.ResponseWriter, r *http.Request, q request) {
	apiVersion, kind, rv, items, ok := c.store.listed(q.list)
	if !ok {
		unavailable(w, "no API server answers and the node's cache does not hold this list")
		return
	}
	_, back := c.state()
	if c.cfg.Upstream.Online() {
		// A server answers (the failure was this request's): the client
		// watches again at once.
		unavailable(w, "the API server did not answer")
		return
	}
	h := &heldWatch{list: q.list, events: make(chan []byte, 64)}
	c.mu.Lock()
	c.watches[h] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.watches, h)
		c.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		for _, it := range items {
			writeEvent(&buf, "ADDED", it.raw)
		}
		b, _ := json.Marshal(map[string]any{
			"apiVersion": apiVersion, "kind": strings.TrimSuffix(kind, "List"),
			"metadata": map[string]any{"resourceVersion": rv, "annotations": map[string]string{initialEventsEnd: "true"}},
		})
		writeEvent(&buf, "BOOKMARK", b)
	}
	_, _ = w.Write(buf.Bytes())
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	timeout := time.Duration(0)
	if s, err := strconv.Atoi(r.URL.Query().Get("timeoutSeconds")); err == nil && s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	for {
		select {
		case ev := <-h.events:
			if _, err := w.Write(ev); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-back:
			return
		case <-expire:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// writeEvent appends a watch event line.
func writeEvent(buf *bytes.Buffer, typ string, obj []byte) {
	b, _ := json.Marshal(event{Type: typ, Object: obj})
	buf.Write(b)
	buf.WriteByte('\n')
}

// notify sends an event to the watches held on lists.
func (c *Cache) notify(lists []string, typ string, obj []byte) {
	var buf bytes.Buffer
	writeEvent(&buf, typ, obj)
	want := map[string]bool{}
	for _, l := range lists {
		want[l] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.watches {
		if want[h.list] {
			select {
			case h.events <- bytes.Clone(buf.Bytes()):
			default: // a client that does not read: it lists again later
			}
		}
	}
}

// serveCached answers a get or list from the cache.
func (c *Cache) serveCached(w http.ResponseWriter, _ *http.Request, q request) {
	if q.object != "" {
		raw, ok := c.store.get(q.object)
		if !ok {
			unavailable(w, "no API server answers and the node's cache does not hold this object")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(raw)
		return
	}
	apiVersion, kind, rv, items, ok := c.store.listed(q.list)
	if !ok {
		unavailable(w, "no API server answers and the node's cache does not hold this list")
		return
	}
	raws := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		raws = append(raws, it.raw)
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"resourceVersion": rv},
		"items":    raws,
	})
	if err != nil {
		unavailable(w, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// tokenValid tells whether a kept TokenRequest's token is still valid: its
// JWT's exp claim, not status.expirationTimestamp (with the API server's
// extended expiration, the token outlives what the status says, and the
// kubelet asks again well before).
func tokenValid(raw []byte) bool {
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	if json.Unmarshal(raw, &tr) != nil {
		return false
	}
	parts := strings.Split(tr.Status.Token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 {
		return false
	}
	return time.Now().Before(time.Unix(claims.Exp, 0))
}

// localResume tells whether a watch resumes (no initial events) from a
// resourceVersion the cache gave an object it changed itself
// (writeback.go).
func (c *Cache) localResume(r *http.Request) bool {
	v := r.URL.Query()
	if v.Get("sendInitialEvents") == "true" {
		return false
	}
	rv, err := strconv.ParseUint(v.Get("resourceVersion"), 10, 64)
	return err == nil && c.store.isLocalRV(rv)
}
