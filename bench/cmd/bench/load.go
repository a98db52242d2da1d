package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// loadResult is what the request benchmark measured.
type loadResult struct {
	Creates     int
	Clients     int
	Errors      int
	CreateTime  time.Duration
	CreatesPerS float64
	// CPUPerCreate is the CPU time all the configuration's processes used
	// during the creates, divided by the creates: unlike creates/s it does
	// not move with what else the machine runs.
	CPUPerCreate time.Duration
	// PeakRSS is the highest RSS of the configuration's processes (summed),
	// sampled every 50 ms during the creates.
	PeakRSS    int64
	CreateP50  time.Duration // per-request latency
	CreateP99  time.Duration
	ListItems  int
	ListTimes  []time.Duration // full list of the namespace, repeated
	ListMedian time.Duration
	// Watch delivery: from the write's response (acknowledged) to the ADDED
	// event, 0 when the event came first; and end to end, from the write's
	// request to the event.
	WatchLoadP50, WatchLoadP99       time.Duration // during the creates
	WatchLoadE2EP50, WatchLoadE2EP99 time.Duration
	WatchLoadN                       int // events matched
	WatchLoadMissed                  int // events of acknowledged creates that never arrived (not in the percentiles)
	WatchLoadEarly                   int // events that arrived before the response
	// WatchLoadSlowest: the slowest 2% of those events by when their write
	// was acknowledged, to tell stalls (many writes acknowledged together,
	// all late) from single late events.
	WatchLoadSlowest         []watchSample `json:",omitempty"`
	WatchPaced               int           // writes one at a time
	WatchP50, WatchP99       time.Duration
	WatchE2EP50, WatchE2EP99 time.Duration
	WatchEarly               int
	Load1                    float64 // 1-minute load average when the creates began
}

// watchSample is one event of the watch during the creates.
type watchSample struct {
	Acked time.Duration // the write's response, from the start of the creates
	Late  time.Duration // from the response to the event (0 when it came first)
}

// slowestEvents returns the slowest share of samples, in the order of Acked.
func slowestEvents(samples []watchSample, share float64) []watchSample {
	s := slices.Clone(samples)
	slices.SortFunc(s, func(a, b watchSample) int { return byLate(b, a) })
	s = s[:int(math.Ceil(float64(len(s))*share))]
	slices.SortFunc(s, func(a, b watchSample) int { return cmp.Compare(a.Acked, b.Acked) })
	return s
}

func byLate(a, b watchSample) int { return cmp.Compare(a.Late, b.Late) }

// stalls groups samples (in the order of Acked) into runs whose writes were
// acknowledged within gap of the one before, and returns how many runs there
// are and the length of the longest.
func stalls(samples []watchSample, gap time.Duration) (runs, longest int) {
	n := 0
	for i, s := range samples {
		if i == 0 || s.Acked-samples[i-1].Acked > gap {
			runs++
			n = 0
		}
		n++
		longest = max(longest, n)
	}
	return runs, longest
}

// newClientset returns a clientset with its own connection (so that n
// clients are n TCP connections), protobuf encoding and no client-side
// rate limit.
func newClientset(base *rest.Config) (*kubernetes.Clientset, error) {
	c := rest.CopyConfig(base)
	c.QPS = -1
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	tlsc, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, err
	}
	c.Transport = &http.Transport{TLSClientConfig: tlsc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 8}
	c.TLSClientConfig = rest.TLSClientConfig{}
	return kubernetes.NewForConfig(c)
}

// eventTimes records when the watcher received each object, by name.
type eventTimes struct {
	mu     sync.Mutex
	at     map[string]time.Time
	notify chan string
}

// runWatcher watches ConfigMaps in ns until ctx ends, recording each ADDED
// event's arrival.
func runWatcher(ctx context.Context, cs *kubernetes.Clientset, ns, rv string, ev *eventTimes) error {
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			now := time.Now()
			if e.Type != watch.Added {
				continue
			}
			cm, ok := e.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			ev.mu.Lock()
			if _, seen := ev.at[cm.Name]; !seen {
				ev.at[cm.Name] = now
			}
			ev.mu.Unlock()
			select {
			case ev.notify <- cm.Name:
			default:
			}
		}
	}()
	return nil
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench"}},
		Data:       map[string]string{"key": strings.Repeat("v", 64), "other": "edgeplane benchmark"},
	}
}

// listRepeats is how often the full list is timed: its median moved by a
// third between runs with 5 (11-37 ms each, on every configuration), and 21
// take ~0.4 s.
const listRepeats = 21

// runLoad creates n ConfigMaps with the given number of concurrent clients
// while a watcher records their events, lists them, then writes paced
// ConfigMaps one at a time to measure watch delivery at rest.
func runLoad(ctx context.Context, base *rest.Config, cpu func() time.Duration, rss func() (int64, error), n, clients, paced int) (loadResult, error) {
	res := loadResult{Creates: n, Clients: clients, WatchPaced: paced}
	admin, err := newClientset(base)
	if err != nil {
		return res, err
	}
	const ns = "bench"
	nsObj, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("creating namespace: %w", err)
	}

	watcher, err := newClientset(base)
	if err != nil {
		return res, err
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	ev := &eventTimes{at: map[string]time.Time{}, notify: make(chan string, 1)}
	if err := runWatcher(wctx, watcher, ns, nsObj.ResourceVersion, ev); err != nil {
		return res, fmt.Errorf("watch: %w", err)
	}

	css := make([]*kubernetes.Clientset, clients)
	for i := range css {
		if css[i], err = newClientset(base); err != nil {
			return res, err
		}
		// Open the connection before the clock starts.
		if _, err := css[i].CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return res, err
		}
	}

	// Creates.
	sent := make([]time.Time, n)
	acked := make([]time.Time, n)
	lat := make([]time.Duration, n)
	failed := make([]bool, n)
	jobs := make(chan int)
	var wg sync.WaitGroup
	res.Load1 = procfs.LoadAvg()
	cpu0 := cpu()
	rssSampler := procfs.NewSampler(rss, 50*time.Millisecond)
	t0 := time.Now()
	for _, cs := range css {
		wg.Go(func() {
			for i := range jobs {
				sent[i] = time.Now()
				_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("cm-%05d", i)), metav1.CreateOptions{})
				acked[i] = time.Now()
				lat[i] = acked[i].Sub(sent[i])
				failed[i] = err != nil
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	res.CreateTime = time.Since(t0)
	res.PeakRSS, _ = rssSampler.Stop()
	res.CPUPerCreate = (cpu() - cpu0) / time.Duration(n)
	var ok []time.Duration
	for i := range n {
		if failed[i] {
			res.Errors++
		} else {
			ok = append(ok, lat[i])
		}
	}
	// Only what was created counts: a configuration that fails requests
	// fast would otherwise look fast (the table shows the errors).
	res.CreatesPerS = float64(n-res.Errors) / res.CreateTime.Seconds()
	res.CreateP50, res.CreateP99 = percentile(ok, 50), percentile(ok, 99)

	// Every created object's event, then their delivery latency.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ev.mu.Lock()
		got := 0
		for name := range ev.at {
			if strings.HasPrefix(name, "cm-") {
				got++
			}
		}
		ev.mu.Unlock()
		if got >= n-res.Errors || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var wl, we []time.Duration
	var samples []watchSample
	ev.mu.Lock()
	for i := range n {
		if at, seen := ev.at[fmt.Sprintf("cm-%05d", i)]; seen && !failed[i] {
			d := at.Sub(acked[i])
			if d < 0 {
				res.WatchLoadEarly++
			}
			wl = append(wl, max(d, 0))
			samples = append(samples, watchSample{Acked: acked[i].Sub(t0), Late: max(d, 0)})
			we = append(we, at.Sub(sent[i]))
		} else if !seen && !failed[i] {
			res.WatchLoadMissed++
		}
	}
	ev.mu.Unlock()
	res.WatchLoadN = len(wl)
	res.WatchLoadP50, res.WatchLoadP99 = percentile(wl, 50), percentile(wl, 99)
	res.WatchLoadE2EP50, res.WatchLoadE2EP99 = percentile(we, 50), percentile(we, 99)
	res.WatchLoadSlowest = slowestEvents(samples, 0.02)

	// List everything, listRepeats times.
	for range listRepeats {
		s := time.Now()
		l, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return res, fmt.Errorf("list: %w", err)
		}
		res.ListTimes = append(res.ListTimes, time.Since(s))
		res.ListItems = len(l.Items)
	}
	res.ListMedian = percentile(res.ListTimes, 50)

	// Paced writes: one at a time, each waiting for its event.
	var pl, pe []time.Duration
	for i := range paced {
		name := fmt.Sprintf("w-%05d", i)
		send := time.Now()
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name), metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("paced create: %w", err)
		}
		ack := time.Now()
		timeout := time.After(10 * time.Second)
	wait:
		for {
			ev.mu.Lock()
			at, seen := ev.at[name]
			ev.mu.Unlock()
			if seen {
				if at.Before(ack) {
					res.WatchEarly++
				}
				pl = append(pl, max(at.Sub(ack), 0))
				pe = append(pe, at.Sub(send))
				break
			}
			select {
			case <-ev.notify:
			case <-timeout:
				break wait
			case <-time.After(time.Millisecond):
			}
		}
	}
	res.WatchP50, res.WatchP99 = percentile(pl, 50), percentile(pl, 99)
	res.WatchE2EP50, res.WatchE2EP99 = percentile(pe, 50), percentile(pe, 99)
	if len(pl) < paced {
		return res, fmt.Errorf("watch: %d of %d paced events arrived", len(pl), paced)
	}
	return res, nil
}

// percentile is the nearest-rank p-th percentile.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
