package nodetoken

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/cluster-bootstrap/util/tokens"

	"github.com/edgeplane/edgeplane/pkg/join"
)

const (
	// NodeGroup is kubeadm's group of node bootstrap tokens: kubeadm's RBAC
	// (kubeadm-config, kubelet-config, get nodes) and edgeplane's CSR
	// bindings apply to it.
	NodeGroup = "system:bootstrappers:kubeadm:default-node-token"
	// UsageAuthentication and UsageSigning are the usages node tokens get:
	// the token authenticates (to create a CSR) and the bootstrap signer
	// signs kube-public/cluster-info with it (discovery).
	UsageAuthentication = "authentication"
	UsageSigning        = "signing"

	namespace = metav1.NamespaceSystem
)

// DefaultUsages are a node token's usages.
var DefaultUsages = []string{UsageAuthentication, UsageSigning}

// CreateOptions describe a new node token. The zero value is a token that
// never expires, in NodeGroup, with DefaultUsages.
type CreateOptions struct {
	TTL         time.Duration // 0: never expires
	Description string
	Groups      []string // empty: NodeGroup
	Usages      []string // empty: DefaultUsages
}

// Validate returns every problem with o.
func (o CreateOptions) Validate() []error {
	var errs []error
	if o.TTL < 0 {
		errs = append(errs, fmt.Errorf("token TTL %s is negative: give a positive duration, or 0 for a token that never expires", o.TTL))
	}
	if o.TTL > 0 && o.TTL < time.Second {
		errs = append(errs, fmt.Errorf("token TTL %s is under a second: the expiry is kept to the second", o.TTL))
	}
	for _, g := range o.Groups {
		if g == join.ServersGroup {
			errs = append(errs, fmt.Errorf("group %s is the joining servers' group, which may read the cluster's sealed CA keys; node tokens must not be in it", g))
		} else if err := bootstraputil.ValidateBootstrapGroupName(g); err != nil {
			errs = append(errs, err)
		}
	}
	if err := bootstraputil.ValidateUsages(o.Usages); err != nil {
		errs = append(errs, err)
	}
	if strings.ContainsAny(o.Description, "\n\r") {
		errs = append(errs, errors.New("token description must be one line"))
	}
	return errs
}

// Info is a node token as List shows it; the secret is left out.
type Info struct {
	ID          string
	Description string
	Expires     time.Time // zero: never
	Usages      []string
	Groups      []string
}

// Create creates a new random node token. Its CA pin is left empty: set
// CAHash from the cluster CA to print it as an agent's token.
func Create(ctx context.Context, client kubernetes.Interface, o CreateOptions) (Token, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return Token{}, errors.Join(errs...)
	}
	for range 3 { // a random ID may be taken
		s, err := bootstraputil.GenerateBootstrapToken()
		if err != nil {
			return Token{}, fmt.Errorf("generating a node token: %w", err)
		}
		id, secret, err := tokens.ParseToken(s)
		if err != nil {
			return Token{}, err
		}
		t := Token{ID: id, Secret: secret}
		_, err = client.CoreV1().Secrets(namespace).Create(ctx, secretFor(t, o, time.Now()), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return Token{}, fmt.Errorf("creating node token %s: %w", id, err)
		}
		return t, nil
	}
	return Token{}, errors.New("creating a node token: three random token IDs were taken; try again")
}

// secretFor is t's bootstrap token Secret.
func secretFor(t Token, o CreateOptions, now time.Time) *corev1.Secret {
	groups, usages := o.Groups, o.Usages
	if len(groups) == 0 {
		groups = []string{NodeGroup}
	}
	if len(usages) == 0 {
		usages = DefaultUsages
	}
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenIDKey:          []byte(t.ID),
		bootstrapapi.BootstrapTokenSecretKey:      []byte(t.Secret),
		bootstrapapi.BootstrapTokenExtraGroupsKey: []byte(strings.Join(groups, ",")),
	}
	if o.Description != "" {
		data[bootstrapapi.BootstrapTokenDescriptionKey] = []byte(o.Description)
	}
	if o.TTL > 0 {
		data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(now.Add(o.TTL).UTC().Format(time.RFC3339))
	}
	for _, u := range usages {
		data[bootstrapapi.BootstrapTokenUsagePrefix+u] = []byte("true")
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      bootstraputil.BootstrapTokenSecretName(t.ID),
			Namespace: namespace,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "edgeplane"},
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		Data: data,
	}
}

// List returns every bootstrap token of the cluster, sorted by ID: node
// tokens and the joining servers' one (its group says which is which).
func List(ctx context.Context, client kubernetes.Interface) ([]Info, error) {
	list, err := client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("type", string(bootstrapapi.SecretTypeBootstrapToken)).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the bootstrap tokens: %w", err)
	}
	var out []Info
	for i := range list.Items {
		if info, ok := infoOf(&list.Items[i]); ok {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func infoOf(s *corev1.Secret) (Info, bool) {
	id := string(s.Data[bootstrapapi.BootstrapTokenIDKey])
	if !bootstraputil.IsValidBootstrapTokenID(id) || s.Name != bootstraputil.BootstrapTokenSecretName(id) {
		return Info{}, false
	}
	info := Info{ID: id, Description: string(s.Data[bootstrapapi.BootstrapTokenDescriptionKey])}
	if exp := string(s.Data[bootstrapapi.BootstrapTokenExpirationKey]); exp != "" {
		if t, err := time.Parse(time.RFC3339, exp); err == nil {
			info.Expires = t
		}
	}
	for k, v := range s.Data {
		if u, ok := strings.CutPrefix(k, bootstrapapi.BootstrapTokenUsagePrefix); ok && string(v) == "true" {
			info.Usages = append(info.Usages, u)
		}
	}
	slices.Sort(info.Usages)
	for _, g := range strings.Split(string(s.Data[bootstrapapi.BootstrapTokenExtraGroupsKey]), ",") {
		if g = strings.TrimSpace(g); g != "" {
			info.Groups = append(info.Groups, g)
		}
	}
	return info, true
}

// Delete deletes the bootstrap tokens of the given IDs (or "<id>.<secret>"
// strings) and returns once cluster-info no longer carries their signatures,
// so that discovery with a deleted token fails from then on (the bootstrap
// signer drops a signature shortly after its Secret goes). Every ID is tried;
// the error names each one that failed.
func Delete(ctx context.Context, client kubernetes.Interface, ids ...string) error {
	var errs []error
	for _, id := range ids {
		if t, err := Parse(id); err == nil {
			id = t.ID
		}
		if !bootstraputil.IsValidBootstrapTokenID(id) {
			errs = append(errs, fmt.Errorf("%q is not a token ID (6 characters of a-z, 0-9; `edgeplane token list` shows them)", redact(id)))
			continue
		}
		err := client.CoreV1().Secrets(namespace).Delete(ctx, bootstraputil.BootstrapTokenSecretName(id), metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("no token with ID %s (expired, or already deleted; `edgeplane token list` shows the tokens)", id))
		case err != nil:
			errs = append(errs, fmt.Errorf("deleting token %s: %w", id, err))
		default:
			if err := waitUnsigned(ctx, client, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// unsignWait bounds how long Delete waits for the bootstrap signer.
var unsignWait = 15 * time.Second

// waitUnsigned waits until kube-public/cluster-info has no signature for the
// token id.
func waitUnsigned(ctx context.Context, client kubernetes.Interface, id string) error {
	key := bootstrapapi.JWSSignatureKeyPrefix + id
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, unsignWait, true, func(ctx context.Context) (bool, error) {
		cm, err := client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			lastErr = err
			return false, nil
		}
		_, signed := cm.Data[key]
		return !signed, nil
	})
	if err != nil {
		if lastErr != nil {
			err = lastErr
		}
		return fmt.Errorf("token %s deleted, but kube-public/cluster-info still carries its signature (%v): discovery with it works until the controller-manager's bootstrap signer removes it", id, err)
	}
	return nil
}
