package conformance

import (
	"strings"
	"testing"
	"time"
)

// junitSample is a Ginkgo v2 JUnit report as e2e.test writes it (trimmed):
// suite nodes, a passed spec, a failed one, a timed-out one, one that
// skipped itself, and one the label filter left out.
const junitSample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="7" disabled="1" errors="0" failures="2" time="754.5">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="7" disabled="0" skipped="2" errors="0" failures="2" time="754.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="3.1"></testcase>
    <testcase name="[It] [sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="12.5"></testcase>
    <testcase name="[It] [sig-apps] Job should allow to use a pod failure policy to ignore failure matching on DisruptionTarget condition [Conformance]" classname="Kubernetes e2e suite" status="failed" time="30.2">
      <failure message="failed to create job in namespace: job-1234&#xA;Unexpected error:&#xA;    &lt;*errors.StatusError&gt;: Job.batch &#34;fail-pod-ignore&#34; is invalid: spec.template.spec.containers[0].securityContext.privileged: Forbidden: disallowed by cluster policy" type="failed">[FAILED] failed to create job
In [It] at: k8s.io/kubernetes/test/e2e/apps/job.go:201 @ 12/06/26 05:00:00.000
</failure>
      <system-err>STEP: Creating a kubernetes client</system-err>
    </testcase>
    <testcase name="[It] [sig-network] Services should serve endpoints on same port and different protocols [Conformance]" classname="Kubernetes e2e suite" status="timedout" time="600">
      <failure message="A spec timeout occurred" type="timedout">[TIMEDOUT] A spec timeout occurred</failure>
    </testcase>
    <testcase name="[It] [sig-storage] HostPath should support r/w [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0.4">
      <skipped message="skipped - Only supported for providers [gce] (not skeleton)"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0.01"></testcase>
  </testsuite>
</testsuites>`

func TestParseJUnit(t *testing.T) {
	res, err := ParseJUnit(strings.NewReader(junitSample))
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed != 1 || res.Failed != 2 || res.Skipped != 1 || res.Total() != 4 {
		t.Errorf("passed %d failed %d skipped %d total %d, want 1 2 1 4 (suite nodes and filtered specs not counted)",
			res.Passed, res.Failed, res.Skipped, res.Total())
	}
	if want := 754500 * time.Millisecond; res.Took != want {
		t.Errorf("took %s, want %s", res.Took, want)
	}
	if len(res.Failures) != 2 {
		t.Fatalf("failures %+v, want 2", res.Failures)
	}
	job := res.Failures[0]
	if !strings.HasPrefix(job.Spec, "[sig-apps] Job should allow") {
		t.Errorf("failures not sorted by spec, or the [It] prefix kept: %q", job.Spec)
	}
	for _, want := range []string{"failed to create job in namespace: job-1234", "securityContext.privileged: Forbidden"} {
		if !strings.Contains(job.Cause, want) {
			t.Errorf("cause %q lacks %q", job.Cause, want)
		}
	}
	if strings.Contains(job.Cause, "\n") {
		t.Errorf("cause %q is not one line", job.Cause)
	}
	if got := res.Failures[1].Cause; got != "[timedout] A spec timeout occurred" {
		t.Errorf("timeout cause %q", got)
	}
	if len(res.SkipReasons) != 1 || res.SkipReasons[0].Cause != "Only supported for providers [gce] (not skeleton)" {
		t.Errorf("skip reasons %+v", res.SkipReasons)
	}
}

func TestParseJUnitRefusesGarbage(t *testing.T) {
	if _, err := ParseJUnit(strings.NewReader("not xml")); err == nil {
		t.Fatal("no error for a report that is not XML")
	}
}

func TestTable(t *testing.T) {
	res, err := ParseJUnit(strings.NewReader(junitSample))
	if err != nil {
		t.Fatal(err)
	}
	res.Phase, res.Took = "parallel", 90*time.Minute
	serial := Result{Phase: "serial", Passed: 27, Took: 20 * time.Minute}
	got := Table("run", []Result{res, serial})
	for _, want := range []string{
		"| parallel | 4 | 1 | 2 | 1 | 1h30m0s |",
		"| serial | 27 | 27 | 0 | 0 | 20m0s |",
		"| **total** | 31 | 28 | 2 | 1 | 1h50m0s |",
		"Failed:\n- [sig-apps] Job should allow",
		"Skipped by the spec itself:\n- [sig-storage] HostPath",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
