package encryption

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

var activeHashLine = regexp.MustCompile(`^apiserver_encryption_config_controller_last_config_info\{[^}]*hash="([^"]+)"[^}]*\} 1`)

// ActiveHash asks the API server which encryption configuration it uses
// (see Hash), from its /metrics.
func ActiveHash(ctx context.Context, cs kubernetes.Interface) (string, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("encryption: reading /metrics: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := activeHashLine.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("encryption: the API server reports no encryption configuration")
}

// WaitActive polls until the API server has loaded the configuration with hash.
func WaitActive(ctx context.Context, cs kubernetes.Interface, hash string, timeout time.Duration) error {
	var last string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		last, lastErr = ActiveHash(ctx, cs)
		return lastErr == nil && last == hash, nil
	})
	if err != nil {
		return fmt.Errorf("encryption: the API server did not load the new configuration within %v (it uses %q, last error: %v)", timeout, last, lastErr)
	}
	return nil
}

// Reencrypt writes every Secret back unchanged. The API server rewrites a
// value it read with any but the first key (a "stale" value) with the first
// key, and skips the others. It returns how many Secrets it went through.
func Reencrypt(ctx context.Context, cs kubernetes.Interface) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 250}
	for {
		list, err := cs.CoreV1().Secrets("").List(ctx, opts)
		if err != nil {
			return n, fmt.Errorf("encryption: listing secrets: %w", err)
		}
		for i := range list.Items {
			if err := rewrite(ctx, cs, &list.Items[i]); err != nil {
				return n, err
			}
			n++
		}
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}

func rewrite(ctx context.Context, cs kubernetes.Interface, s *corev1.Secret) error {
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			cur, err := cs.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s = cur
		}
		first = false
		_, err := cs.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("encryption: rewriting secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// RotateOptions configures RotateKeys.
type RotateOptions struct {
	Path string // the encryption configuration
	// RetiredPath keeps the dropped keys for restoring older snapshots (optional).
	RetiredPath string
	Client      kubernetes.Interface
	// Remaining counts the stored Secrets not encrypted with key; the old
	// keys are dropped only when it returns 0. Optional.
	Remaining func(ctx context.Context, key string) (int, error)
	Now       func() time.Time
	// ReloadTimeout bounds each wait for the API server to load a new configuration.
	ReloadTimeout time.Duration
	Out           io.Writer // progress, one line per step
}

// RotateKeys replaces the encryption key of a running server without a
// restart: it adds a new key as the write key (the old ones still decrypt),
// waits for the API server to reload, rewrites every Secret, checks that none
// is left under an old key, then drops the old keys and waits again.
func RotateKeys(ctx context.Context, o RotateOptions) (string, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReloadTimeout == 0 {
		o.ReloadTimeout = 3 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	cfg, data, err := Load(o.Path)
	if err != nil {
		return "", err
	}
	if active, err := ActiveHash(ctx, o.Client); err != nil {
		return "", err
	} else if active != Hash(data) {
		return "", fmt.Errorf("encryption: the API server does not use %s as it is on disk (reload pending, or another rotation running?): try again in a minute", o.Path)
	}
	old := Keys(cfg)
	key, err := AddKey(cfg, o.Now())
	if err != nil {
		return "", err
	}
	hash, err := Write(o.Path, cfg)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(o.Out, "added key %s, waiting for the API server to load it\n", key)
	if err := WaitActive(ctx, o.Client, hash, o.ReloadTimeout); err != nil {
		return key, err
	}
	n, err := Reencrypt(ctx, o.Client)
	if err != nil {
		return key, err
	}
	fmt.Fprintf(o.Out, "re-encrypted %d secrets with %s\n", n, key)
	if o.Remaining != nil {
		left, err := o.Remaining(ctx, key)
		if err != nil {
			return key, err
		}
		if left > 0 {
			return key, fmt.Errorf("encryption: %d secrets are still stored under other keys; the old keys %v are kept: run rotate-keys again", left, old)
		}
	}
	if o.RetiredPath != "" {
		if err := retire(o.RetiredPath, cfg, key); err != nil {
			return key, err
		}
	}
	if err := KeepOnly(cfg, key); err != nil {
		return key, err
	}
	if hash, err = Write(o.Path, cfg); err != nil {
		return key, err
	}
	if err := WaitActive(ctx, o.Client, hash, o.ReloadTimeout); err != nil {
		return key, err
	}
	fmt.Fprintf(o.Out, "removed old keys %v\n", old)
	return key, nil
}
