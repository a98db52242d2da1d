package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Result is one phase's outcome, from the JUnit report e2e.test writes.
type Result struct {
	Phase string
	Took  time.Duration
	// Passed and Failed count the specs that ran; Skipped those that ran
	// and skipped themselves (e2eskipper: a precondition the cluster does
	// not meet). Specs the filter left out are not counted.
	Passed, Failed, Skipped int
	Failures                []Failure
	SkipReasons             []Failure
}

// Total is the number of specs that ran.
func (r Result) Total() int { return r.Passed + r.Failed + r.Skipped }

// Failure is a spec that failed (or skipped) and why.
type Failure struct {
	Spec  string
	Cause string
}

type junitSuites struct {
	Suites []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Time  float64     `xml:"time,attr"`
	Cases []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Body    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Body    string `xml:",chardata"`
	} `xml:"error"`
}

// ReadJUnit reads a Ginkgo JUnit report.
func ReadJUnit(path string) (Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	return ParseJUnit(f)
}

// ParseJUnit counts a Ginkgo JUnit report's specs. The suite's own setup
// and teardown nodes ([SynchronizedBeforeSuite]...) count when they fail.
func ParseJUnit(r io.Reader) (Result, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return Result{}, fmt.Errorf("JUnit report: %w", err)
	}
	var res Result
	for _, s := range doc.Suites {
		res.Took += time.Duration(s.Time * float64(time.Second))
		for _, c := range s.Cases {
			// A spec's name starts with "[It] "; the other cases are the
			// suite's own nodes ([SynchronizedBeforeSuite],
			// [ReportAfterSuite] ...), which count only when they fail.
			name, spec := strings.CutPrefix(c.Name, "[It] ")
			switch {
			case c.Failure != nil || c.Error != nil:
				msg, typ := "", ""
				if c.Failure != nil {
					msg, typ = c.Failure.Message, c.Failure.Type
					if msg == "" {
						msg = c.Failure.Body
					}
				} else {
					msg, typ = c.Error.Message, c.Error.Type
					if msg == "" {
						msg = c.Error.Body
					}
				}
				res.Failed++
				res.Failures = append(res.Failures, Failure{Spec: name, Cause: cause(typ, msg)})
			case !spec:
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				// A spec the filter left out reads "skipped"; one that
				// skipped itself says why.
				if c.Skipped != nil && strings.TrimSpace(c.Skipped.Message) != "skipped" && c.Skipped.Message != "" {
					res.Skipped++
					res.SkipReasons = append(res.SkipReasons, Failure{Spec: name, Cause: cause("", strings.TrimPrefix(c.Skipped.Message, "skipped - "))})
				}
			default:
				res.Passed++
			}
		}
	}
	sort.Slice(res.Failures, func(i, j int) bool { return res.Failures[i].Spec < res.Failures[j].Spec })
	sort.Slice(res.SkipReasons, func(i, j int) bool { return res.SkipReasons[i].Spec < res.SkipReasons[j].Spec })
	return res, nil
}

// cause is the first lines of a failure message, on one line.
func cause(typ, msg string) string {
	msg = strings.TrimSpace(msg)
	lines := strings.Split(msg, "\n")
	var keep []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			keep = append(keep, l)
		}
		if len(keep) == 3 {
			break
		}
	}
	out := strings.Join(keep, " / ")
	if len(out) > 400 {
		out = out[:400] + "..."
	}
	if typ != "" && typ != "failed" {
		out = "[" + typ + "] " + out
	}
	return out
}

// Table is the Markdown table of a run's phases, then each failure and
// each self-skipped spec with its cause.
func Table(title string, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", title)
	b.WriteString("| phase | specs run | passed | failed | skipped | duration |\n|---|---|---|---|---|---|\n")
	var all Result
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", r.Phase, r.Total(), r.Passed, r.Failed, r.Skipped, r.Took.Round(time.Second))
		all.Passed += r.Passed
		all.Failed += r.Failed
		all.Skipped += r.Skipped
		all.Took += r.Took
		all.Failures = append(all.Failures, r.Failures...)
		all.SkipReasons = append(all.SkipReasons, r.SkipReasons...)
	}
	fmt.Fprintf(&b, "| **total** | %d | %d | %d | %d | %s |\n", all.Total(), all.Passed, all.Failed, all.Skipped, all.Took.Round(time.Second))
	if len(all.Failures) > 0 {
		b.WriteString("\nFailed:\n")
		for _, f := range all.Failures {
			fmt.Fprintf(&b, "- %s\n  - %s\n", f.Spec, f.Cause)
		}
	}
	if len(all.SkipReasons) > 0 {
		b.WriteString("\nSkipped by the spec itself:\n")
		for _, f := range all.SkipReasons {
			fmt.Fprintf(&b, "- %s\n  - %s\n", f.Spec, f.Cause)
		}
	}
	return b.String()
}
