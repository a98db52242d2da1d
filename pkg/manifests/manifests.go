// Package manifests keeps the manifests of a directory applied, as k3s's
// deploy controller does: edgeplane's packaged manifests (CoreDNS), embedded
// in the binary and written to <data-dir>/manifests at start, and any file a
// user drops there.
//
// Each *.yaml, *.yml or *.json file may hold several documents. They are
// applied with server-side apply (field manager "edgeplane") when the server
// starts, when the file changes, and when an object it applied is deleted;
// objects a changed file no longer holds, and the objects of a removed file,
// are deleted. The directory is re-checked every Interval: a check reads the
// files and asks the API server's watch cache whether the objects are still
// there, and writes nothing when nothing changed (the datastore may be on
// flash). A document whose kind the API server does not serve yet (its CRD
// is not there) is retried at the next check.
//
// A packaged manifest named in Disabled is removed from the directory and its
// objects are deleted. A file <name>.skip next to <name>.yaml keeps a packaged
// file from being rewritten, so that a user's edits stay.
//
//	Start: write the packaged files, remove the disabled ones, start the loop.
//	Ready: nil once started (applying goes on in the background).
//	Stop:  end the loop; idempotent.
package manifests

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// DefaultInterval is how often the directory and the applied objects are
// re-checked.
const DefaultInterval = 30 * time.Second

// Options configure the controller.
type Options struct {
	// Dir is the manifests directory, <data-dir>/manifests.
	Dir string
	// Kubeconfig is an admin kubeconfig.
	Kubeconfig string
	// Packaged are the packaged manifests to write, by name (Packaged()).
	Packaged map[string][]byte
	// Disabled names packaged manifests to remove with their objects.
	Disabled []string
	// Interval between checks; 0 means DefaultInterval.
	Interval time.Duration
}

// Validate reports every problem with o.
func (o Options) Validate() []error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("manifests: no directory"))
	}
	if o.Kubeconfig == "" {
		errs = append(errs, errors.New("manifests: no kubeconfig"))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("manifests: interval %s must not be negative", o.Interval))
	}
	for _, name := range o.Disabled {
		if _, ok := o.Packaged[name]; !ok {
			errs = append(errs, fmt.Errorf("manifests: %q is not a packaged manifest", name))
		}
	}
	return errs
}

// fileState is what the controller knows of one file.
type fileState struct {
	hash    [sha256.Size]byte
	objects []objectRef // applied
	pending bool        // some document failed: retry at the next check
}

// Controller keeps the directory's manifests applied.
type Controller struct {
	o    Options
	loop background.Loop

	mu    sync.Mutex
	files map[string]*fileState // by file name
	// removals are the objects of disabled packaged manifests still to delete.
	removals map[string][]*unstructured.Unstructured
	// checks counts completed checks (tests wait on it).
	checks int
	// kick asks the loop for a check now.
	kick chan struct{}
}

// New validates o and returns a controller.
func New(o Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	return &Controller{o: o, files: map[string]*fileState{}, removals: map[string][]*unstructured.Unstructured{}, kick: make(chan struct{}, 1)}, nil
}

// Name is the component's name.
func (c *Controller) Name() string { return "manifests" }

// Start writes the packaged manifests, removes the disabled ones and starts
// the loop that applies the directory.
func (c *Controller) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("manifests")
	cl, err := c.newClient()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.o.Dir, 0o700); err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	if err := c.writePackaged(logger); err != nil {
		return err
	}
	c.loop.Start(klog.NewContext(ctx, logger), func(ctx context.Context) { c.run(ctx, cl) })
	return nil
}

// Ready is nil: applying goes on in the background.
func (c *Controller) Ready(context.Context) error { return nil }

// Stop ends the loop.
func (c *Controller) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

// Trigger asks for a check now rather than at the next interval.
func (c *Controller) Trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Checks is the number of checks completed so far.
func (c *Controller) Checks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checks
}

func (c *Controller) newClient() (*client, error) {
	cfg, err := kubeclient.Config(c.o.Kubeconfig, "manifests", kubeclient.Steady)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	return &client{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// writePackaged writes each packaged manifest (unless a .skip file keeps
// the user's copy), and removes the disabled ones, remembering their
// objects for the loop to delete.
func (c *Controller) writePackaged(logger klog.Logger) error {
	names := make([]string, 0, len(c.o.Packaged))
	for name := range c.o.Packaged {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		content := c.o.Packaged[name]
		path := filepath.Join(c.o.Dir, name+".yaml")
		if slices.Contains(c.o.Disabled, name) {
			objs, err := decode(name+".yaml", content)
			if err != nil {
				return fmt.Errorf("manifests: packaged %s: %w", name, err)
			}
			c.removals[name+".yaml"] = objs
			if err := os.Remove(path); err == nil {
				logger.Info("Disabled: removed the packaged manifest; its objects are deleted", "file", path)
			} else if !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("manifests: --disable=%s: %w", name, err)
			}
			continue
		}
		if _, err := os.Stat(path + ".skip"); err == nil {
			logger.Info("Not rewriting a packaged manifest: a .skip file keeps the copy on disk", "file", path)
			continue
		}
		changed, err := atomicfile.Write(path, content, 0o600)
		if err != nil {
			return fmt.Errorf("manifests: %w", err)
		}
		if changed {
			logger.V(1).Info("Wrote packaged manifest", "file", path)
		}
	}
	return nil
}

// run checks at once, then every Interval or when triggered.
func (c *Controller) run(ctx context.Context, cl *client) {
	t := time.NewTicker(c.o.Interval)
	defer t.Stop()
	for {
		c.check(ctx, cl)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// check brings the cluster in line with the directory once.
func (c *Controller) check(ctx context.Context, cl *client) {
	logger := klog.FromContext(ctx)
	c.removeDisabled(ctx, cl)
	present, err := c.readDir()
	if err != nil {
		logger.Error(err, "Reading the manifests directory", "dir", c.o.Dir)
	}
	for _, name := range sortedKeys(present) {
		c.syncFile(ctx, cl, name, present[name])
	}
	if err == nil { // a directory that could not be read removes nothing
		c.mu.Lock()
		var gone []string
		for name := range c.files {
			if _, ok := present[name]; !ok {
				gone = append(gone, name)
			}
		}
		c.mu.Unlock()
		sort.Strings(gone)
		for _, name := range gone {
			c.removeFile(ctx, cl, name)
		}
	}
	c.mu.Lock()
	c.checks++
	c.mu.Unlock()
}

// readDir reads every manifest file of the directory, by name.
func (c *Controller) readDir() (map[string][]byte, error) {
	entries, err := os.ReadDir(c.o.Dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !isManifest(name) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(c.o.Dir, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[name] = data
	}
	return out, errors.Join(errs...)
}

func isManifest(name string) bool {
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// syncFile applies a new, changed or pending file, and re-applies one whose
// objects were deleted; an unchanged file with all its objects costs reads
// only.
func (c *Controller) syncFile(ctx context.Context, cl *client, name string, data []byte) {
	logger := klog.FromContext(ctx).WithValues("file", name)
	hash := sha256.Sum256(data)
	c.mu.Lock()
	st := c.files[name]
	c.mu.Unlock()
	reason := ""
	switch {
	case st == nil:
		reason = "new"
	case st.hash != hash:
		reason = "changed"
	case st.pending:
		reason = "retry"
	default:
		for _, r := range st.objects {
			ok, err := cl.exists(ctx, r)
			if err != nil {
				logger.V(2).Info("Could not tell whether an object exists; checking again later", "object", r.String(), "err", err.Error())
				continue
			}
			if !ok {
				reason = "object deleted: " + r.String()
				break
			}
		}
	}
	if reason == "" {
		return
	}
	objs, err := decode(name, data)
	if err != nil {
		if st == nil || st.hash != hash { // say it once per content
			logger.Error(err, "Not applying a manifest that does not parse; fix the file")
		}
		c.setState(name, &fileState{hash: hash, objects: stObjects(st)})
		return
	}
	next := &fileState{hash: hash}
	for _, obj := range objs {
		ref, err := cl.apply(ctx, name, obj)
		var unknown *errUnknownKind
		switch {
		case errors.As(err, &unknown):
			logger.Info("Kind not served yet (its CRD may not be installed): retrying at the next check", "kind", unknown.gvk.String(), "name", obj.GetName(), "retryIn", c.o.Interval)
			next.pending = true
		case err != nil:
			logger.Error(err, "Applying a manifest failed: retrying at the next check")
			next.pending = true
		default:
			next.objects = append(next.objects, ref)
		}
	}
	// Objects of the old content that the new one no longer holds.
	if st != nil && !next.pending {
		for _, old := range st.objects {
			if !slices.Contains(next.objects, old) {
				if err := cl.delete(ctx, old); err != nil {
					logger.Error(err, "Deleting an object the manifest no longer holds")
					next.pending = true
					next.objects = append(next.objects, old)
				}
			}
		}
	}
	if next.pending && st != nil { // keep tracking what applied before
		for _, old := range st.objects {
			if !slices.Contains(next.objects, old) {
				next.objects = append(next.objects, old)
			}
		}
	}
	c.setState(name, next)
	logger.Info("Applied manifest", "reason", reason, "objects", len(next.objects), "complete", !next.pending)
}

func stObjects(st *fileState) []objectRef {
	if st == nil {
		return nil
	}
	return st.objects
}

func (c *Controller) setState(name string, st *fileState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.files[name] = st
}

// removeFile deletes the objects of a file that left the directory.
func (c *Controller) removeFile(ctx context.Context, cl *client, name string) {
	logger := klog.FromContext(ctx).WithValues("file", name)
	c.mu.Lock()
	st := c.files[name]
	c.mu.Unlock()
	var left []objectRef
	for i := len(st.objects) - 1; i >= 0; i-- {
		if err := cl.delete(ctx, st.objects[i]); err != nil {
			logger.Error(err, "Deleting the objects of a removed manifest: retrying at the next check")
			left = append(left, st.objects[i])
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(left) > 0 {
		st.objects = left
		return
	}
	delete(c.files, name)
	logger.Info("Manifest removed: deleted its objects", "objects", len(st.objects))
}

// removeDisabled deletes the objects of disabled packaged manifests, newest
// document first; what fails is tried again at the next check.
func (c *Controller) removeDisabled(ctx context.Context, cl *client) {
	c.mu.Lock()
	names := sortedKeys(c.removals)
	c.mu.Unlock()
	for _, name := range names {
		logger := klog.FromContext(ctx).WithValues("file", name)
		c.mu.Lock()
		objs := c.removals[name]
		c.mu.Unlock()
		var left []*unstructured.Unstructured
		for i := len(objs) - 1; i >= 0; i-- {
			obj := objs[i].DeepCopy()
			ref, err := cl.resolve(obj)
			var unknown *errUnknownKind
			if errors.As(err, &unknown) {
				continue // nothing of that kind can exist
			}
			if err == nil {
				err = cl.delete(ctx, ref)
			}
			if err != nil {
				logger.Error(err, "Deleting the objects of a disabled manifest: retrying at the next check")
				left = append([]*unstructured.Unstructured{objs[i]}, left...)
			}
		}
		c.mu.Lock()
		if len(left) == 0 {
			delete(c.removals, name)
			delete(c.files, name)
		} else {
			c.removals[name] = left
		}
		c.mu.Unlock()
		if len(left) == 0 {
			logger.Info("Disabled manifest: its objects are deleted", "objects", len(objs))
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
