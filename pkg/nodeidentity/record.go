package nodeidentity

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Where records live: one Secret per node in kube-system, which neither
// nodes nor node tokens may read or write. The fingerprint is not secret;
// a Secret keeps the record among what only admins touch, as k3s keeps its
// node passwords.
const (
	Namespace  = metav1.NamespaceSystem
	SecretType = corev1.SecretType("edgeplane.io/node-identity")
	nameSuffix = ".node-identity"

	keyNode        = "node"
	keyFingerprint = "fingerprint"
	annBoundBy     = "edgeplane.io/bound-by"
	annBoundAt     = "edgeplane.io/bound-at"
)

// Record is the identity a node name is bound to.
type Record struct {
	Node string
	// Fingerprint is Fingerprint of the node's identity key.
	Fingerprint string
	// BoundBy says who bound it: "token <id>", "enrollment", "server".
	BoundBy string
	BoundAt time.Time
}

// SecretName is the name of node's record, or an error when node's name
// is too long to name one (a DNS subdomain of at most 253 characters).
func SecretName(node string) (string, error) {
	name := node + nameSuffix
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("node name %q cannot have an identity record (%s): use a node name of at most %d characters", node, strings.Join(msgs, "; "), validation.DNS1123SubdomainMaxLength-len(nameSuffix))
	}
	return name, nil
}

// Get reads node's record; ok is false when there is none.
func Get(ctx context.Context, client kubernetes.Interface, node string) (r Record, ok bool, err error) {
	name, err := SecretName(node)
	if err != nil {
		return Record{}, false, err
	}
	s, err := client.CoreV1().Secrets(Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("node identity of %s: %w", node, err)
	}
	r, err = recordOf(s)
	return r, err == nil, err
}

func recordOf(s *corev1.Secret) (Record, error) {
	if s.Type != SecretType || len(s.Data[keyFingerprint]) == 0 || len(s.Data[keyNode]) == 0 {
		return Record{}, fmt.Errorf("node identity record %s/%s is not one (type %q, keys %s and %s): delete it with `edgeplane node forget`", s.Namespace, s.Name, s.Type, keyNode, keyFingerprint)
	}
	r := Record{Node: string(s.Data[keyNode]), Fingerprint: string(s.Data[keyFingerprint]), BoundBy: s.Annotations[annBoundBy]}
	if t, err := time.Parse(time.RFC3339, s.Annotations[annBoundAt]); err == nil {
		r.BoundAt = t
	}
	return r, nil
}

// Bind records r unless node already has a record; it returns the record
// that holds afterwards, which is another one when bound is false (the
// caller compares fingerprints).
func Bind(ctx context.Context, client kubernetes.Interface, r Record) (held Record, bound bool, err error) {
	name, err := SecretName(r.Node)
	if err != nil {
		return Record{}, false, err
	}
	if r.BoundAt.IsZero() {
		r.BoundAt = time.Now()
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "edgeplane"},
			Annotations: map[string]string{annBoundBy: r.BoundBy, annBoundAt: r.BoundAt.UTC().Format(time.RFC3339)},
		},
		Type: SecretType,
		Data: map[string][]byte{keyNode: []byte(r.Node), keyFingerprint: []byte(r.Fingerprint)},
	}
	_, err = client.CoreV1().Secrets(Namespace).Create(ctx, s, metav1.CreateOptions{})
	switch {
	case err == nil:
		return r, true, nil
	case apierrors.IsAlreadyExists(err):
		held, ok, err := Get(ctx, client, r.Node)
		if err != nil {
			return Record{}, false, err
		}
		if !ok {
			return Record{}, false, fmt.Errorf("node identity of %s: the record was deleted while binding: try again", r.Node)
		}
		return held, false, nil
	default:
		return Record{}, false, fmt.Errorf("node identity of %s: %w", r.Node, err)
	}
}

// Forget deletes node's record; existed says whether there was one.
func Forget(ctx context.Context, client kubernetes.Interface, node string) (existed bool, err error) {
	name, err := SecretName(node)
	if err != nil {
		return false, err
	}
	err = client.CoreV1().Secrets(Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("node identity of %s: %w", node, err)
	}
}
