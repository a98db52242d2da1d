package main

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// opSummary is one operation's (or the total's, or the watches' delivery) figures.
type opSummary struct {
	Op      string  `json:"op"`
	Count   int     `json:"count"` // successful
	Errors  int     `json:"errors"`
	TooMany int     `json:"too_many_requests"`
	PerSec  float64 `json:"per_sec"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	Maxms   float64 `json:"max_ms"`
}

type watchSummary struct {
	Watches         int       `json:"watches"`
	NamespaceWide   int       `json:"namespace_wide"`
	Expected        int       `json:"expected"` // (write, watch) pairs that had to be delivered
	Matched         int       `json:"matched"`
	Missed          int       `json:"missed"`
	ResolvedRelist  int       `json:"resolved_by_relist"`
	Events          int       `json:"events"`
	Bookmarks       int       `json:"bookmarks"`
	Reestablished   int       `json:"reestablished"`
	Relists         int       `json:"relists"`
	Errors          int       `json:"errors"`
	Silent          []int     `json:"silent,omitempty"`        // watches that had writes to see and delivered none
	Delivery        opSummary `json:"delivery"`                // write request start -> event received
	MinDeliveredPer int       `json:"min_delivered_per_watch"` // over the watches with writers
	WithoutWriters  int       `json:"without_writers"`         // watches whose group no client wrote to
}

type serverSummary struct {
	PID       int     `json:"pid,omitempty"`
	RSSMaxMiB float64 `json:"rss_max_mib,omitempty"`
	RSSEndMiB float64 `json:"rss_end_mib,omitempty"`
	CPUCores  float64 `json:"cpu_cores,omitempty"` // average cores busy during the run
}

type summary struct {
	RunID       string         `json:"run_id"`
	Namespace   string         `json:"namespace"`
	Clients     int            `json:"clients"`
	DurationS   float64        `json:"duration_s"`
	Mix         map[string]int `json:"mix"`
	Protobuf    bool           `json:"protobuf"`
	Ops         []opSummary    `json:"ops"`
	Total       opSummary      `json:"total"`
	WireTooMany int64          `json:"wire_429s"` // 429 responses, including those client-go retried
	Watch       watchSummary   `json:"watch"`
	Server      serverSummary  `json:"server"`
	Load1Start  float64        `json:"load1_start"`
	Load1End    float64        `json:"load1_end"`
	Failures    []string       `json:"failures,omitempty"`
	OK          bool           `json:"ok"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// quantiles sorts lat in place and fills the latency fields.
func quantiles(s *opSummary, lat []time.Duration, elapsed time.Duration) {
	s.Count = len(lat)
	if elapsed > 0 {
		s.PerSec = float64(len(lat)) / elapsed.Seconds()
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	s.P50ms, s.P99ms, s.Maxms = ms(at(0.50)), ms(at(0.99)), ms(lat[len(lat)-1])
}

func summarize(o *options, runID string, clients []*client, ws *watchSet, counts *transportCounts, elapsed time.Duration, srv serverSummary) *summary {
	sum := &summary{RunID: runID, Namespace: o.namespace, Clients: o.clients, DurationS: elapsed.Seconds(),
		Mix: o.mix, Protobuf: o.protobuf, WireTooMany: counts.tooMany.Load(), Server: srv}
	var all []time.Duration
	for _, op := range ops {
		s := opSummary{Op: op}
		var lat []time.Duration
		for _, c := range clients {
			if st := c.stats[op]; st != nil {
				lat = append(lat, st.lat...)
				s.Errors += st.errors
				s.TooMany += st.tooMany
				sum.Failures = append(sum.Failures, st.messages...)
			}
		}
		if len(lat) == 0 && s.Errors == 0 && s.TooMany == 0 {
			continue
		}
		all = append(all, lat...)
		quantiles(&s, lat, elapsed)
		sum.Ops = append(sum.Ops, s)
		sum.Total.Errors += s.Errors
		sum.Total.TooMany += s.TooMany
	}
	sum.Total.Op = "total"
	quantiles(&sum.Total, all, elapsed)

	w := &sum.Watch
	w.Watches = len(ws.all)
	w.MinDeliveredPer = -1
	var delivery []time.Duration
	for _, x := range ws.all {
		x.mu.Lock()
		if x.selector == "" {
			w.NamespaceWide++
		}
		w.Expected += x.expected
		w.Matched += x.matched
		w.Missed += x.missed
		w.ResolvedRelist += x.resolved
		w.Events += x.events
		w.Bookmarks += x.bookmarks
		w.Reestablished += x.opened - 1
		w.Relists += x.relists
		w.Errors += x.errors
		if x.expected > 0 && x.matched == 0 {
			w.Silent = append(w.Silent, x.id)
		}
		if x.expected == 0 {
			w.WithoutWriters++
		} else if w.MinDeliveredPer < 0 || x.matched < w.MinDeliveredPer {
			w.MinDeliveredPer = x.matched
		}
		delivery = append(delivery, x.delivery...)
		sum.Failures = append(sum.Failures, x.messages...)
		x.mu.Unlock()
	}
	w.Delivery.Op = "watch delivery"
	quantiles(&w.Delivery, delivery, 0)

	// The assertions.
	var fails []string
	if sum.Total.Errors > 0 {
		fails = append(fails, fmt.Sprintf("%d operations failed with errors other than 429", sum.Total.Errors))
	}
	if sum.Total.Count == 0 {
		fails = append(fails, "no operation succeeded")
	}
	if w.Missed > 0 {
		fails = append(fails, fmt.Sprintf("%d acknowledged writes did not reach a watch within %s", w.Missed, o.watchBound))
	}
	if w.Errors > 0 {
		fails = append(fails, fmt.Sprintf("%d watch errors", w.Errors))
	}
	if len(w.Silent) > 0 {
		fails = append(fails, fmt.Sprintf("watches %v delivered nothing although their writers wrote", w.Silent))
	}
	if w.Watches > 0 && w.Expected == 0 {
		fails = append(fails, "no write was acknowledged for the watches to see")
	}
	if o.rssBudgetMiB > 0 && srv.RSSMaxMiB > float64(o.rssBudgetMiB) {
		fails = append(fails, fmt.Sprintf("server RSS peaked at %.0f MiB, over the %d MiB budget", srv.RSSMaxMiB, o.rssBudgetMiB))
	}
	if o.rssBudgetMiB > 0 && srv.RSSMaxMiB == 0 {
		fails = append(fails, "--rss-budget-mib set but the server's RSS could not be read (--server-pid)")
	}
	sum.OK = len(fails) == 0
	sum.Failures = append(fails, sum.Failures...)
	return sum
}

func (s *summary) table() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "load run %s: %d clients, %d watches (%d namespace-wide), %.1f s, protobuf=%v, load average %.2f -> %.2f\n",
		s.RunID, s.Clients, s.Watch.Watches, s.Watch.NamespaceWide, s.DurationS, s.Protobuf, s.Load1Start, s.Load1End)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tok\terrors\t429\tper s\tp50 ms\tp99 ms\tmax ms\t")
	rows := append(append([]opSummary{}, s.Ops...), s.Total, s.Watch.Delivery)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n", r.Op, r.Count, r.Errors, r.TooMany, r.PerSec, r.P50ms, r.P99ms, r.Maxms)
	}
	_ = tw.Flush()
	w := s.Watch
	fmt.Fprintf(&b, "watches: %d of %d expected deliveries matched, %d missed, %d resolved by relist; %d events, %d bookmarks, %d re-established, %d relists, %d errors; fewest per watch %d (%d watches had no writer)\n",
		w.Matched, w.Expected, w.Missed, w.ResolvedRelist, w.Events, w.Bookmarks, w.Reestablished, w.Relists, w.Errors, w.MinDeliveredPer, w.WithoutWriters)
	fmt.Fprintf(&b, "429 responses on the wire (retried by client-go included): %d\n", s.WireTooMany)
	if s.Server.PID > 0 {
		fmt.Fprintf(&b, "server pid %d: RSS max %.0f MiB, end %.0f MiB, CPU %.2f cores\n", s.Server.PID, s.Server.RSSMaxMiB, s.Server.RSSEndMiB, s.Server.CPUCores)
	}
	status := "OK"
	if !s.OK {
		status = "FAILED"
	}
	fmt.Fprintf(&b, "result: %s\n", status)
	for _, f := range s.Failures {
		fmt.Fprintf(&b, "  - %s\n", f)
	}
	return b.String()
}

// sampler reads the server's RSS every 250 ms and its CPU time at the ends.
type sampler struct {
	pid    int
	start  time.Time
	cpu0   time.Duration
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	max    int64
	last   int64
}

func startSampler(pid int) *sampler {
	s := &sampler{pid: pid, start: time.Now(), stopCh: make(chan struct{}), done: make(chan struct{})}
	if pid <= 0 {
		close(s.done)
		return s
	}
	s.cpu0, _ = procfs.CPUTime(pid)
	go func() {
		defer close(s.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, err := procfs.RSS(pid); err == nil {
				s.mu.Lock()
				s.max, s.last = max(s.max, rss), rss
				s.mu.Unlock()
			}
			select {
			case <-s.stopCh:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() serverSummary {
	if s.pid <= 0 {
		return serverSummary{}
	}
	close(s.stopCh)
	<-s.done
	cpu, err := procfs.CPUTime(s.pid)
	out := serverSummary{PID: s.pid, RSSMaxMiB: float64(s.max) / (1 << 20), RSSEndMiB: float64(s.last) / (1 << 20)}
	if err == nil {
		out.CPUCores = (cpu - s.cpu0).Seconds() / time.Since(s.start).Seconds()
	}
	return out
}
