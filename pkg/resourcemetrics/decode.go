package resourcemetrics

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's resource metrics (/metrics/resource, Prometheus text
// format) that the API is computed from: cumulative CPU seconds, the
// memory working set, and each container's start time, each sample with
// the time the kubelet measured it (milliseconds since the epoch).
const (
	nodeCPU        = "node_cpu_usage_seconds_total"
	nodeMemory     = "node_memory_working_set_bytes"
	containerCPU   = "container_cpu_usage_seconds_total"
	containerMem   = "container_memory_working_set_bytes"
	containerStart = "container_start_time_seconds"
)

// maxBody bounds what one kubelet's answer may hold: under 1 KB per
// container, so 16 MiB is thousands of pods; a larger answer is refused
// whole.
const maxBody = 16 << 20

// point is one measurement of a node or a container.
type point struct {
	// start is when the container started (zero for a node): its
	// cumulative CPU was zero then.
	start time.Time
	// ts is when the CPU was measured (the memory when there is no CPU sample).
	ts time.Time
	// cpu is the cumulative CPU time in nanoseconds (nanocore-seconds).
	cpu uint64
	// mem is the working set in bytes.
	mem uint64
}

// complete reports whether p has what a usage needs: a time, CPU and memory.
// The kubelet reports zero for a container whose stats it has not
// collected yet.
func (p point) complete() bool { return !p.ts.IsZero() && p.cpu != 0 && p.mem != 0 }

// podPoint is a pod's containers' points by container name.
type podPoint map[string]point

// batch is what one scrape found: nodes by name, pods by namespace/name.
type batch struct {
	nodes map[string]point
	pods  map[types.NamespacedName]podPoint
}

func newBatch() *batch {
	return &batch{nodes: map[string]point{}, pods: map[types.NamespacedName]podPoint{}}
}

// decode reads one kubelet's /metrics/resource answer for node. Samples
// without a timestamp are taken at now. A node or a container without
// every figure is left out, as is a pod with such a container.
func decode(r io.Reader, node string, now time.Time) (*batch, error) {
	b := newBatch()
	var n point
	pods := map[types.NamespacedName]podPoint{}
	body := &countingReader{r: io.LimitReader(r, maxBody+1)}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for line := 1; sc.Scan(); line++ {
		if body.n > maxBody {
			return nil, errTooLarge
		}
		s, ok, err := parseSample(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if !ok {
			continue
		}
		ts := now
		if s.hasTime {
			ts = time.UnixMilli(s.timeMillis)
		}
		switch s.name {
		case nodeCPU:
			n.cpu, n.ts = seconds(s.value), ts
		case nodeMemory:
			n.mem = bytesOf(s.value)
			if n.ts.IsZero() {
				n.ts = ts
			}
		case containerCPU, containerMem, containerStart:
			pod, container, err := containerOf(s.labels)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", line, s.name, err)
			}
			pp := pods[pod]
			if pp == nil {
				pp = podPoint{}
				pods[pod] = pp
			}
			c := pp[container]
			switch s.name {
			case containerCPU:
				c.cpu, c.ts = seconds(s.value), ts
			case containerMem:
				c.mem = bytesOf(s.value)
				if c.ts.IsZero() {
					c.ts = ts
				}
			case containerStart:
				c.start = time.Unix(0, int64(s.value*1e9))
			}
			pp[container] = c
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if body.n > maxBody {
		return nil, errTooLarge
	}
	if n.complete() {
		b.nodes[node] = n
	}
pods:
	for ref, pp := range pods {
		for _, c := range pp {
			if !c.complete() {
				continue pods
			}
		}
		b.pods[ref] = pp
	}
	return b, nil
}

// errTooLarge is an answer larger than maxBody.
var errTooLarge = fmt.Errorf("the answer is larger than %d MiB", maxBody>>20)

// countingReader counts what it has read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// seconds converts cumulative CPU seconds to nanoseconds.
func seconds(v float64) uint64 {
	if !(v > 0) || v > math.MaxUint64/1e9 {
		return 0
	}
	return uint64(v * 1e9)
}

// bytesOf converts a byte count to an integer.
func bytesOf(v float64) uint64 {
	if !(v > 0) || v >= math.MaxUint64 {
		return 0
	}
	return uint64(v)
}

// sample is one line of the text format.
type sample struct {
	name       string
	labels     []byte // between the braces, unparsed
	value      float64
	timeMillis int64
	hasTime    bool
}

// wanted are the metric names decode reads; others are skipped unparsed.
var wanted = map[string]bool{nodeCPU: true, nodeMemory: true, containerCPU: true, containerMem: true, containerStart: true}

// parseSample parses one line: `name{labels} value [timestamp]`. ok is
// false for comments, blank lines and metrics decode does not read.
func parseSample(line []byte) (s sample, ok bool, err error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return s, false, nil
	}
	end := bytes.IndexAny(line, "{ \t")
	if end < 0 {
		return s, false, fmt.Errorf("no value in %q", line)
	}
	if !wanted[string(line[:end])] {
		return s, false, nil
	}
	s.name = string(line[:end])
	rest := line[end:]
	if rest[0] == '{' {
		closeAt, err := labelsEnd(rest)
		if err != nil {
			return s, false, err
		}
		s.labels, rest = rest[1:closeAt], rest[closeAt+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return s, false, fmt.Errorf("%s: want a value and an optional timestamp, got %q", s.name, rest)
	}
	if s.value, err = strconv.ParseFloat(string(fields[0]), 64); err != nil {
		return s, false, fmt.Errorf("%s: value: %w", s.name, err)
	}
	if len(fields) == 2 {
		if s.timeMillis, err = strconv.ParseInt(string(fields[1]), 10, 64); err != nil {
			return s, false, fmt.Errorf("%s: timestamp: %w", s.name, err)
		}
		s.hasTime = true
	}
	return s, true, nil
}

// labelsEnd is the index of the brace that closes the label set opening
// b, skipping braces inside quoted values.
func labelsEnd(b []byte) (int, error) {
	quoted := false
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i, nil
		}
	}
	return 0, fmt.Errorf("unterminated label set in %q", b)
}

// containerOf reads the pod and container a container sample is of.
func containerOf(labels []byte) (types.NamespacedName, string, error) {
	var pod types.NamespacedName
	var container string
	err := eachLabel(labels, func(k string, v string) {
		switch k {
		case "namespace":
			pod.Namespace = v
		case "pod":
			pod.Name = v
		case "container":
			container = v
		}
	})
	if err != nil {
		return pod, "", err
	}
	if pod.Namespace == "" || pod.Name == "" || container == "" {
		return pod, "", fmt.Errorf("labels %q lack namespace, pod or container", labels)
	}
	return pod, container, nil
}

// eachLabel calls f with each name="value" pair of labels, the value
// unescaped (\\, \" and \n).
func eachLabel(labels []byte, f func(name, value string)) error {
	rest := labels
	for {
		rest = bytes.TrimLeft(rest, " \t,")
		if len(rest) == 0 {
			return nil
		}
		eq := bytes.IndexByte(rest, '=')
		if eq <= 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
			return fmt.Errorf("malformed labels %q", labels)
		}
		name := string(bytes.TrimSpace(rest[:eq]))
		rest = rest[eq+2:]
		var v []byte
		closed := false
		for i := 0; i < len(rest); i++ {
			c := rest[i]
			if c == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					v = append(v, '\n')
				default:
					v = append(v, rest[i])
				}
				continue
			}
			if c == '"' {
				rest, closed = rest[i+1:], true
				break
			}
			v = append(v, c)
		}
		if !closed {
			return fmt.Errorf("unterminated label value in %q", labels)
		}
		f(name, string(v))
	}
}
