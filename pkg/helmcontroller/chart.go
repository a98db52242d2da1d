package helmcontroller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/getter"
	"helm.sh/helm/v4/pkg/registry"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// downloadTimeout bounds one download of an index or a chart.
const downloadTimeout = 2 * time.Minute

// permanentError is a problem with the HelmChart itself: retrying does not
// help until the object (or what it names) changes.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(format string, a ...any) error { return permanentError{fmt.Errorf(format, a...)} }

// isPermanent reports whether err is a problem of the object, not of the
// moment.
func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// chartSource says where a HelmChart's chart comes from, for events.
func chartSource(spec *HelmChartSpec) string {
	switch {
	case spec.ChartContent != "":
		return "spec.chartContent"
	case spec.Repo != "" && spec.Version != "":
		return fmt.Sprintf("%s version %s from %s", spec.Chart, spec.Version, spec.Repo)
	case spec.Repo != "":
		return fmt.Sprintf("%s (latest) from %s", spec.Chart, spec.Repo)
	case strings.HasPrefix(spec.Chart, "oci://") && spec.Version != "":
		return spec.Chart + " version " + spec.Version
	}
	return spec.Chart
}

// loadChart reads the chart of hc: spec.chartContent, a chart of spec.repo,
// an oci:// reference, or the URL of an archive. Downloads are made from
// this process (a host without a registry uses chartContent).
func loadChart(ctx context.Context, client kubernetes.Interface, hc *HelmChart) (*chart.Chart, error) {
	spec := &hc.Spec
	if spec.ChartContent != "" {
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(spec.ChartContent), ""))
		if err != nil {
			return nil, permanent("spec.chartContent is not base64: %w", err)
		}
		ch, err := loader.LoadArchive(bytes.NewReader(b))
		if err != nil {
			return nil, permanent("spec.chartContent is not a chart archive (.tgz): %w", err)
		}
		return ch, nil
	}
	opts, err := downloadOptions(ctx, client, hc)
	if err != nil {
		return nil, err
	}
	var data *bytes.Buffer
	switch {
	case strings.HasPrefix(spec.Chart, "oci://"):
		data, err = pullOCI(spec, opts)
	case spec.Repo != "":
		data, err = fromRepo(spec, opts)
	case strings.HasPrefix(spec.Chart, "https://") || strings.HasPrefix(spec.Chart, "http://"):
		data, err = download(spec.Chart, opts)
	default:
		return nil, permanent("spec.chart %q names no chart this controller can fetch: give spec.repo, a URL (https://.../chart.tgz, oci://...), or spec.chartContent", spec.Chart)
	}
	if err != nil {
		return nil, err
	}
	ch, err := loader.LoadArchive(data)
	if err != nil {
		return nil, permanent("%s is not a chart archive: %w", chartSource(spec), err)
	}
	return ch, nil
}

// fetchOptions are how downloads are made.
type fetchOptions struct {
	transport          *http.Transport
	username, password string
	passCredentials    bool
	plainHTTP          bool
}

func (o fetchOptions) getterOptions() []getter.Option {
	opts := []getter.Option{getter.WithTransport(o.transport), getter.WithTimeout(downloadTimeout), getter.WithUserAgent(kubeclient.UserAgent("helm-controller"))}
	if o.username != "" || o.password != "" {
		opts = append(opts, getter.WithBasicAuth(o.username, o.password), getter.WithPassCredentialsAll(o.passCredentials))
	}
	return opts
}

// downloadOptions reads the CA bundle and credentials hc names.
func downloadOptions(ctx context.Context, client kubernetes.Interface, hc *HelmChart) (fetchOptions, error) {
	spec := &hc.Spec
	o := fetchOptions{passCredentials: spec.AuthPassCredentials, plainHTTP: spec.PlainHTTP}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: spec.InsecureSkipTLSVerify} //nolint:gosec // the HelmChart's own choice
	var pem []string
	if spec.RepoCA != "" {
		pem = append(pem, spec.RepoCA)
	}
	if ref := spec.RepoCAConfigMap; ref != nil {
		cm, err := client.CoreV1().ConfigMaps(hc.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return o, fmt.Errorf("spec.repoCAConfigMap %s/%s: %w", hc.Namespace, ref.Name, err)
		}
		for _, v := range cm.Data {
			pem = append(pem, v)
		}
	}
	if len(pem) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(strings.Join(pem, "\n"))) {
			return o, permanent("spec.repoCA / spec.repoCAConfigMap hold no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tlsConfig
	o.transport = t
	if ref := spec.AuthSecret; ref != nil {
		s, err := client.CoreV1().Secrets(hc.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return o, fmt.Errorf("spec.authSecret %s/%s: %w", hc.Namespace, ref.Name, err)
		}
		o.username, o.password = string(s.Data[corev1.BasicAuthUsernameKey]), string(s.Data[corev1.BasicAuthPasswordKey])
	}
	return o, nil
}

// download fetches one URL.
func download(u string, o fetchOptions) (*bytes.Buffer, error) {
	g, err := getter.NewHTTPGetter(o.getterOptions()...)
	if err != nil {
		return nil, err
	}
	data, err := g.Get(u, getter.WithURL(u))
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", u, err)
	}
	return data, nil
}

// fromRepo finds spec.chart at spec.version (a version or a range; the
// newest when empty) in spec.repo's index.yaml and downloads it.
func fromRepo(spec *HelmChartSpec, o fetchOptions) (*bytes.Buffer, error) {
	base := strings.TrimSuffix(spec.Repo, "/")
	indexURL := base + "/index.yaml"
	data, err := download(indexURL, o)
	if err != nil {
		return nil, err
	}
	index := &repo.IndexFile{}
	if err := yaml.Unmarshal(data.Bytes(), index); err != nil {
		return nil, fmt.Errorf("%s: %w", indexURL, err)
	}
	index.SortEntries()
	cv, err := index.Get(spec.Chart, spec.Version)
	if err != nil {
		return nil, fmt.Errorf("chart %q version %q in %s: %w", spec.Chart, spec.Version, indexURL, err)
	}
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("chart %q version %s in %s has no URL", spec.Chart, cv.Version, indexURL)
	}
	chartURL, err := repo.ResolveReferenceURL(base+"/", cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("chart %q in %s: %w", spec.Chart, indexURL, err)
	}
	if o.username != "" && !o.passCredentials && !sameHost(base, chartURL) {
		o.username, o.password = "", "" // helm passes credentials to the repository's host only
	}
	return download(chartURL, o)
}

func sameHost(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	return errA == nil && errB == nil && ua.Host == ub.Host
}

// pullOCI pulls an oci:// chart at spec.version (a version or a range; the
// newest tag when empty).
func pullOCI(spec *HelmChartSpec, o fetchOptions) (*bytes.Buffer, error) {
	opts := []registry.ClientOption{registry.ClientOptHTTPClient(&http.Client{Transport: o.transport, Timeout: downloadTimeout}), registry.ClientOptCredentialsFile("")}
	if o.plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	if o.username != "" || o.password != "" {
		opts = append(opts, registry.ClientOptBasicAuth(o.username, o.password))
	}
	rc, err := registry.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	ref := strings.TrimPrefix(spec.Chart, "oci://")
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		tags, err := rc.Tags(ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.Chart, err)
		}
		tag, err := registry.GetTagMatchingVersionOrConstraint(tags, spec.Version)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.Chart, err)
		}
		ref += ":" + tag
	}
	res, err := rc.Pull(ref)
	if err != nil {
		return nil, fmt.Errorf("pull oci://%s: %w", ref, err)
	}
	return bytes.NewBuffer(res.Chart.Data), nil
}
