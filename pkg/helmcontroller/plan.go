package helmcontroller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// defaultTimeout is helm's --timeout default.
const defaultTimeout = 5 * time.Minute

// plan is what a HelmChart and its HelmChartConfig ask for. Its hash is
// what the release is labelled with.
type plan struct {
	Release   string `json:"release"`
	Namespace string `json:"namespace"`
	// Source says where the chart comes from; chartContent is in by hash.
	Chart, Repo, Version, ContentSHA256 string
	Values                              map[string]any `json:"values"`
	CreateNamespace, TakeOwnership      bool
	ServerSide                          string
	ForceConflicts                      bool
	FailurePolicy                       FailurePolicy
	Timeout                             time.Duration
	Driver                              string
}

// hash is the release label's value: hex SHA-256 of the plan, cut to the
// 63 characters a label value may have.
func (p *plan) hash() string {
	b, _ := json.Marshal(p) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:63]
}

// makePlan merges what hc and conf (may be nil) ask for. It reads the
// Secrets of valuesSecrets.
func makePlan(ctx context.Context, client kubernetes.Interface, hc *HelmChart, conf *HelmChartConfig) (*plan, error) {
	spec := &hc.Spec
	p := &plan{
		Release:         hc.Name,
		Namespace:       hc.Namespace,
		Chart:           spec.Chart,
		Repo:            spec.Repo,
		Version:         spec.Version,
		CreateNamespace: spec.CreateNamespace,
		TakeOwnership:   spec.TakeOwnership,
		ServerSide:      spec.ServerSide,
		ForceConflicts:  spec.ForceConflicts,
		FailurePolicy:   spec.FailurePolicy,
		Timeout:         defaultTimeout,
		Driver:          spec.Driver,
	}
	if spec.TargetNamespace != "" {
		p.Namespace = spec.TargetNamespace
	}
	if spec.ChartContent != "" {
		sum := sha256.Sum256([]byte(spec.ChartContent))
		p.ContentSHA256 = hex.EncodeToString(sum[:])
		p.Chart, p.Repo, p.Version = "", "", ""
	}
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		p.Timeout = spec.Timeout.Duration
	}
	if p.FailurePolicy == "" {
		p.FailurePolicy = FailurePolicyReinstall
	}
	if p.Driver == "" {
		p.Driver = "secret"
	}
	var files []valuesFile
	add := func(from string, data []byte) {
		if len(data) > 0 && string(data) != "null" {
			files = append(files, valuesFile{from: from, data: data})
		}
	}
	add("spec.valuesContent", []byte(spec.ValuesContent))
	add("spec.values", spec.Values)
	secretFiles, err := secretValues(ctx, client, hc.Namespace, "spec.valuesSecrets", spec.ValuesSecrets)
	if err != nil {
		return nil, err
	}
	files = append(files, secretFiles...)
	if conf != nil {
		add("HelmChartConfig spec.valuesContent", []byte(conf.Spec.ValuesContent))
		add("HelmChartConfig spec.values", conf.Spec.Values)
		secretFiles, err := secretValues(ctx, client, hc.Namespace, "HelmChartConfig spec.valuesSecrets", conf.Spec.ValuesSecrets)
		if err != nil {
			return nil, err
		}
		files = append(files, secretFiles...)
		if conf.Spec.FailurePolicy != "" {
			p.FailurePolicy = conf.Spec.FailurePolicy
		}
		if conf.Spec.ServerSide != "" {
			p.ServerSide = conf.Spec.ServerSide
		}
		if conf.Spec.ForceConflicts != nil {
			p.ForceConflicts = *conf.Spec.ForceConflicts
		}
	}
	if p.Values, err = mergeValues(files, spec.Set); err != nil {
		return nil, permanentError{err}
	}
	return p, nil
}

// secretValues reads the values files that refs name. A missing Secret is
// an error unless ignoreUpdates marks it optional (k3s's rule).
func secretValues(ctx context.Context, client kubernetes.Interface, namespace, field string, refs []SecretSpec) ([]valuesFile, error) {
	var out []valuesFile
	for i, ref := range refs {
		if len(ref.Keys) == 0 {
			continue
		}
		s, err := client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && ref.IgnoreUpdates {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: Secret %s/%s: %w", field, i, namespace, ref.Name, err)
		}
		for _, key := range ref.Keys {
			data, ok := s.Data[key]
			if !ok {
				if ref.IgnoreUpdates {
					continue
				}
				return nil, fmt.Errorf("%s[%d]: Secret %s/%s has no key %q", field, i, namespace, ref.Name, key)
			}
			out = append(out, valuesFile{from: fmt.Sprintf("Secret %s/%s key %s", namespace, ref.Name, key), data: data})
		}
	}
	return out, nil
}
