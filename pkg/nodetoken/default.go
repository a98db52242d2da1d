package nodetoken

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/pkg/join"
)

// FileName is the default node token's file in the server's data dir.
const FileName = "node-token"

// defaultDescription marks the default node token's Secret.
const defaultDescription = "edgeplane: default node token, in <data-dir>/" + FileName + " of a server"

// EnsureDefault makes sure the server's default node token exists and
// returns it, pinned to caPEM. The token never expires.
//
//   - No <dataDir>/node-token: a new token is written there (0600,
//     atomically), then its Secret is created.
//   - The file and its Secret are there: the token is reused (the file is
//     rewritten only if the CA pin changed).
//   - The file is there but its Secret is gone (deleted by someone, or a
//     datastore restored from before it): the token was revoked, so it is
//     NOT brought back; a new one replaces it in the file and the change is
//     logged. Deleting the Secret (`edgeplane token delete ID`) therefore
//     revokes the default token and the next start rotates it.
func EnsureDefault(ctx context.Context, client kubernetes.Interface, dataDir string, caPEM []byte) (Token, error) {
	logger := klog.FromContext(ctx)
	caHash := join.CAHash(caPEM)
	cur, ok, err := ReadFile(dataDir)
	if err != nil {
		return Token{}, err
	}
	if ok {
		live, err := isLive(ctx, client, cur)
		if err != nil {
			return Token{}, err
		}
		if live {
			if cur.CAHash != caHash {
				cur.CAHash = caHash
				if err := WriteFile(dataDir, cur); err != nil {
					return Token{}, err
				}
			}
			return cur, nil
		}
		logger.Info("The default node token's Secret is gone (revoked): replacing the token", "oldID", cur.ID, "file", filepath.Join(dataDir, FileName))
	}
	t, err := newDefault(ctx, client, dataDir, caHash)
	if err != nil {
		return Token{}, err
	}
	logger.Info("Created the default node token", "id", t.ID, "file", filepath.Join(dataDir, FileName))
	return t, nil
}

// RotateDefault replaces the default node token of the server on dataDir:
// a new token (pinned to caPEM, never expiring) is written to
// <dataDir>/node-token and its Secret created, then the old token's Secret
// is deleted, which revokes it (Delete waits until cluster-info no longer
// carries its signature). Nodes that joined with the old token keep their
// certificates. It returns both tokens; old is the zero Token when the
// data dir had none.
func RotateDefault(ctx context.Context, client kubernetes.Interface, dataDir string, caPEM []byte) (old, cur Token, err error) {
	old, ok, err := ReadFile(dataDir)
	if err != nil {
		return Token{}, Token{}, err
	}
	cur, err = newDefault(ctx, client, dataDir, join.CAHash(caPEM))
	if err != nil {
		if ok {
			// The old token still works: keep it in the file.
			if werr := WriteFile(dataDir, old); werr != nil {
				err = errors.Join(err, werr)
			}
		}
		return Token{}, Token{}, err
	}
	if !ok {
		return Token{}, cur, nil
	}
	// The old token may be gone already (deleted by hand): only a
	// failure to delete it is an error.
	err = client.CoreV1().Secrets(namespace).Delete(ctx, bootstraputil.BootstrapTokenSecretName(old.ID), metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return old, cur, fmt.Errorf("the new default node token is in %s, but revoking the old one (%s) failed: %w; delete it with `edgeplane token delete %s`",
			filepath.Join(dataDir, FileName), old.ID, err, old.ID)
	}
	if err := waitUnsigned(ctx, client, old.ID); err != nil {
		return old, cur, err
	}
	return old, cur, nil
}

// newDefault makes a new default node token: the file first, then its
// Secret, so that a crash in between leaves a file whose Secret is
// missing, which the next start replaces (EnsureDefault).
func newDefault(ctx context.Context, client kubernetes.Interface, dataDir, caHash string) (Token, error) {
	for range 3 { // a random ID may be taken
		s, err := bootstraputil.GenerateBootstrapToken()
		if err != nil {
			return Token{}, fmt.Errorf("generating the default node token: %w", err)
		}
		t, err := Parse(s)
		if err != nil {
			return Token{}, err
		}
		t.CAHash = caHash
		if err := WriteFile(dataDir, t); err != nil {
			return Token{}, err
		}
		_, err = client.CoreV1().Secrets(namespace).Create(ctx, secretFor(t, CreateOptions{Description: defaultDescription}, time.Now()), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return Token{}, fmt.Errorf("creating the default node token: %w", err)
		}
		return t, nil
	}
	return Token{}, errors.New("creating the default node token: three random token IDs were taken; try again")
}

// isLive reports whether t's Secret exists with t's secret.
func isLive(ctx context.Context, client kubernetes.Interface, t Token) (bool, error) {
	s, err := client.CoreV1().Secrets(namespace).Get(ctx, bootstraputil.BootstrapTokenSecretName(t.ID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the default node token's Secret: %w", err)
	}
	return s.Type == bootstrapapi.SecretTypeBootstrapToken &&
		string(s.Data[bootstrapapi.BootstrapTokenSecretKey]) == t.Secret, nil
}

// ReadFile reads <dataDir>/node-token; ok is false when it does not exist.
func ReadFile(dataDir string) (t Token, ok bool, err error) {
	path := filepath.Join(dataDir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Token{}, false, nil
	}
	if err != nil {
		return Token{}, false, fmt.Errorf("reading the node token: %w", err)
	}
	if t, err = Parse(string(b)); err != nil {
		return Token{}, false, fmt.Errorf("%s: %w (delete the file and restart the server to get a new one)", path, err)
	}
	return t, true, nil
}

// WriteFile writes t to <dataDir>/node-token, mode 0600, atomically and
// durably: a temporary file in the same directory is written and synced,
// renamed over the old one, and the directory synced.
func WriteFile(dataDir string, t Token) error {
	if _, err := atomicfile.Write(filepath.Join(dataDir, FileName), []byte(t.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the node token: %w", err)
	}
	return nil
}
