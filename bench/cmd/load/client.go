package main

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	runLabel   = "load-run"
	groupLabel = "load-group"
)

// transportCounts counts 429 responses on the wire: client-go retries them
// (honouring Retry-After) before an operation sees an error.
type transportCounts struct {
	tooMany atomic.Int64
}

type countingRT struct {
	next   http.RoundTripper
	counts *transportCounts
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.counts.tooMany.Add(1)
	}
	return resp, err
}

// newClientset returns a clientset with its own HTTP transport (one
// connection per client, as separate processes would have), no client-side
// rate limit and, with pb, protobuf on the wire.
func newClientset(base *rest.Config, pb bool, counts *transportCounts) (*kubernetes.Clientset, error) {
	c := rest.CopyConfig(base)
	c.QPS, c.Burst = -1, 0
	c.Timeout = 0
	if pb {
		c.ContentType = "application/vnd.kubernetes.protobuf"
		c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	tlsc, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, err
	}
	c.Transport = &http.Transport{TLSClientConfig: tlsc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}
	c.TLSClientConfig = rest.TLSClientConfig{}
	if counts != nil {
		c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingRT{next: rt, counts: counts} }
	}
	return kubernetes.NewForConfig(c)
}

// opStats collects one operation's outcomes for one client.
type opStats struct {
	lat      []time.Duration // successful operations
	errors   int             // failures other than 429
	tooMany  int             // operations that ended in a 429
	messages []string        // the first few error messages
}

// client is one writer/reader: it owns the ConfigMaps it creates, all in its
// label group, so updates never conflict with another client.
type client struct {
	id    int
	cs    *kubernetes.Clientset
	o     *options
	runID string
	group string
	ws    *watchSet
	rng   *mrand.Rand
	pool  []*corev1.ConfigMap // oldest first
	seq   int
	value string

	mu    sync.Mutex
	stats map[string]*opStats
}

func newClient(id int, cs *kubernetes.Clientset, o *options, runID string, ws *watchSet) *client {
	return &client{
		id: id, cs: cs, o: o, runID: runID, ws: ws,
		group: "g" + strconv.Itoa(id%o.groups),
		rng:   mrand.New(mrand.NewPCG(uint64(id)+1, uint64(time.Now().UnixNano()))),
		value: strings.Repeat("x", o.valueBytes),
		stats: map[string]*opStats{},
	}
}

// pick draws an operation from the mix and adapts it to the pool: a create
// with a full pool deletes the oldest object instead, and an operation on an
// existing object with an empty pool creates one.
func (c *client) pick() string {
	total := 0
	for _, op := range ops {
		total += c.o.mix[op]
	}
	n := c.rng.IntN(total)
	op := "create"
	for _, candidate := range ops {
		if n < c.o.mix[candidate] {
			op = candidate
			break
		}
		n -= c.o.mix[candidate]
	}
	switch {
	case op == "create" && len(c.pool) >= c.o.objects:
		return "delete"
	case (op == "update" || op == "get" || op == "delete") && len(c.pool) == 0:
		return "create"
	}
	return op
}

// run issues operations one after another until end; a request in flight at
// end completes and counts. ctx only interrupts (SIGINT).
func (c *client) run(ctx context.Context, end time.Time) {
	for ctx.Err() == nil && time.Now().Before(end) {
		op := c.pick()
		start := time.Now()
		err := c.do(ctx, op, start)
		if ctx.Err() != nil {
			return
		}
		c.record(op, time.Since(start), err)
	}
}

func (c *client) do(ctx context.Context, op string, start time.Time) error {
	cms := c.cs.CoreV1().ConfigMaps(c.o.namespace)
	switch op {
	case "create":
		c.seq++
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:   fmt.Sprintf("%s-c%d-%d", c.runID, c.id, c.seq),
				Labels: map[string]string{runLabel: c.runID, groupLabel: c.group},
			},
			Data: map[string]string{"v": c.value, "seq": "0"},
		}
		got, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		c.pool = append(c.pool, got)
		c.ws.acknowledged(c.group, got.Name, got.ResourceVersion, start, time.Now())
	case "update":
		i := c.rng.IntN(len(c.pool))
		cm := c.pool[i].DeepCopy()
		n, _ := strconv.Atoi(cm.Data["seq"])
		cm.Data["seq"] = strconv.Itoa(n + 1)
		got, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			// Nobody else writes this object: a conflict is a failure, but
			// refresh so that the next update does not fail the same way.
			if fresh, gerr := cms.Get(ctx, cm.Name, metav1.GetOptions{}); gerr == nil {
				c.pool[i] = fresh
			}
		}
		if err != nil {
			return err
		}
		c.pool[i] = got
		c.ws.acknowledged(c.group, got.Name, got.ResourceVersion, start, time.Now())
	case "get":
		cm := c.pool[c.rng.IntN(len(c.pool))]
		got, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Data["seq"] != cm.Data["seq"] {
			return fmt.Errorf("get %s: seq %s, want %s (read after acknowledged write is stale)", cm.Name, got.Data["seq"], cm.Data["seq"])
		}
	case "list":
		sel := runLabel + "=" + c.runID + "," + groupLabel + "=" + c.group
		if _, err := cms.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 500}); err != nil {
			return err
		}
	case "delete":
		// Oldest first keeps the pool a sliding window.
		cm := c.pool[0]
		if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		c.pool = c.pool[1:]
	default:
		return errors.New("unknown operation " + op)
	}
	return nil
}

func (c *client) record(op string, d time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats[op]
	if s == nil {
		s = &opStats{}
		c.stats[op] = s
	}
	switch {
	case err == nil:
		s.lat = append(s.lat, d)
	case apierrors.IsTooManyRequests(err):
		s.tooMany++
	default:
		s.errors++
		if len(s.messages) < 3 {
			s.messages = append(s.messages, fmt.Sprintf("client %d %s: %v", c.id, op, err))
		}
	}
}
