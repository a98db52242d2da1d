package airgap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	leasesapi "github.com/containerd/containerd/api/services/leases/v1"
	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"github.com/containerd/containerd/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// gRPC metadata keys containerd reads the namespace and the lease from.
const (
	namespaceHeader = "containerd-namespace"
	leaseHeader     = "containerd-lease"
)

// Labels containerd and its CRI plugin read.
const (
	labelGCExpire     = "containerd.io/gc.expire"
	labelGCRefContent = "containerd.io/gc.ref.content."
	// LabelCRIImage marks an image as CRI's (what `crictl images` lists).
	LabelCRIImage = "io.cri-containerd.image"
	// LabelCRIPinned marks an image the kubelet's image GC must keep
	// (read by CRI from containerd 1.7 on).
	LabelCRIPinned = "io.cri-containerd.pinned"
)

// writeChunk is the size of each content write message (gRPC's default
// message limit is 4 MiB).
const writeChunk = 1 << 20

// client talks to containerd through its gRPC services.
type client struct {
	conn      *grpc.ClientConn
	content   contentapi.ContentClient
	images    imagesapi.ImagesClient
	leases    leasesapi.LeasesClient
	version   versionapi.VersionClient
	namespace string
}

// socketPath turns "unix:///run/x.sock" or "/run/x.sock" into the path.
func socketPath(address string) string {
	return strings.TrimPrefix(address, "unix://")
}

func dial(address, namespace string) (*client, error) {
	path := socketPath(address)
	if path == "" {
		return nil, errors.New("airgap: no containerd address: set Options.Address to containerd's socket, e.g. /run/containerd/containerd.sock")
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("airgap: containerd socket %s: %w", path, err)
	}
	return &client{
		conn:      conn,
		content:   contentapi.NewContentClient(conn),
		images:    imagesapi.NewImagesClient(conn),
		leases:    leasesapi.NewLeasesClient(conn),
		version:   versionapi.NewVersionClient(conn),
		namespace: namespace,
	}, nil
}

func (c *client) close() { _ = c.conn.Close() }

// ns is ctx with the containerd namespace, and the lease when not empty.
func (c *client) ns(ctx context.Context, lease string) context.Context {
	md := metadata.Pairs(namespaceHeader, c.namespace)
	if lease != "" {
		md.Append(leaseHeader, lease)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// WaitReady waits until containerd answers on address (a unix socket path,
// or unix://path) or ctx ends, and returns containerd's version. Use it
// before talking to a containerd that may still be starting.
func WaitReady(ctx context.Context, address string) (string, error) {
	c, err := dial(address, "default")
	if err != nil {
		return "", err
	}
	defer c.close()
	var version string
	var last error
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		v, err := c.version.Version(callCtx, &emptypb.Empty{})
		if err != nil {
			last = err
			return false, nil
		}
		version = v.Version
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("airgap: containerd at %s does not answer: %v (last error: %v); is containerd running with that grpc address?",
			socketPath(address), err, last)
	}
	return version, nil
}

// newLease creates a lease that holds everything written under it until it
// is deleted, so containerd's GC cannot collect a half-imported image. It
// expires by itself after an hour, should we die before deleting it.
func (c *client) newLease(ctx context.Context) (string, func(), error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "edgeplane-airgap-" + hex.EncodeToString(b[:])
	_, err := c.leases.Create(c.ns(ctx, ""), &leasesapi.CreateRequest{
		ID:     id,
		Labels: map[string]string{labelGCExpire: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
	})
	if err != nil {
		return "", nil, fmt.Errorf("airgap: create a containerd lease: %w", err)
	}
	return id, func() {
		// Not ctx: the lease must go even when the import was cancelled.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := c.leases.Delete(c.ns(dctx, ""), &leasesapi.DeleteRequest{ID: id}); err != nil {
			klog.FromContext(ctx).Error(err, "Deleting containerd lease; it expires by itself within an hour", "lease", id)
		}
	}, nil
}

// hasBlob reports whether containerd has the blob; when it has, the blob
// is added to the lease so it stays until the image records point at it.
func (c *client) hasBlob(ctx context.Context, lease, digest string) (bool, error) {
	_, err := c.content.Info(c.ns(ctx, ""), &contentapi.InfoRequest{Digest: digest})
	if status.Code(err) == codes.NotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up blob %s: %w", digest, err)
	}
	_, err = c.leases.AddResource(c.ns(ctx, ""), &leasesapi.AddResourceRequest{
		ID: lease, Resource: &leasesapi.Resource{ID: digest, Type: "content"},
	})
	if err != nil {
		return false, fmt.Errorf("add blob %s to lease %s: %w", digest, lease, err)
	}
	return true, nil
}

// writeBlob streams r into containerd's content store under the lease.
// containerd checks size and digest on commit.
func (c *client) writeBlob(ctx context.Context, lease, digest string, size int64, r io.Reader) error {
	ctx, cancel := context.WithCancel(c.ns(ctx, lease))
	defer cancel()
	stream, err := c.content.Write(ctx)
	if err != nil {
		return fmt.Errorf("write blob %s: %w", digest, err)
	}
	send := func(req *contentapi.WriteContentRequest) error {
		if err := stream.Send(req); err != nil {
			if err == io.EOF {
				_, err = stream.Recv()
			}
			return err
		}
		_, err := stream.Recv()
		return err
	}
	ref := "edgeplane-airgap-" + digest
	// STAT first: it takes the ref's lock; any earlier partial ingest of
	// the same ref is overwritten from offset 0.
	if err := send(&contentapi.WriteContentRequest{Action: contentapi.WriteAction_STAT, Ref: ref}); err != nil {
		return fmt.Errorf("write blob %s: %w", digest, err)
	}
	buf := make([]byte, writeChunk)
	var offset int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			req := &contentapi.WriteContentRequest{
				Action: contentapi.WriteAction_WRITE, Ref: ref, Total: size, Expected: digest,
				Offset: offset, Data: buf[:n],
			}
			if err := send(req); err != nil {
				return fmt.Errorf("write blob %s at offset %d: %w", digest, offset, err)
			}
			offset += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("read blob %s: %w (truncated or corrupt file)", digest, rerr)
		}
	}
	err = send(&contentapi.WriteContentRequest{
		Action: contentapi.WriteAction_COMMIT, Ref: ref, Total: size, Expected: digest, Offset: offset,
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("commit blob %s (%d bytes): %w", digest, offset, err)
	}
	_ = stream.CloseSend()
	return nil
}

// setLabels sets labels on a blob, leaving its other labels alone.
func (c *client) setLabels(ctx context.Context, digest string, labels map[string]string) error {
	if len(labels) == 0 {
		return nil
	}
	paths := make([]string, 0, len(labels))
	for k := range labels {
		paths = append(paths, "labels."+k)
	}
	_, err := c.content.Update(c.ns(ctx, ""), &contentapi.UpdateRequest{
		Info:       &contentapi.Info{Digest: digest, Labels: labels},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: paths},
	})
	if err != nil {
		return fmt.Errorf("label blob %s: %w", digest, err)
	}
	return nil
}

// putImage creates the image record name -> target, or points an existing
// one at target, with the CRI labels (and the pin when pinned).
func (c *client) putImage(ctx context.Context, lease, name string, target *types.Descriptor, pinned bool) error {
	labels := map[string]string{LabelCRIImage: "managed"}
	if pinned {
		labels[LabelCRIPinned] = "pinned"
	}
	ctx = c.ns(ctx, lease)
	img := &imagesapi.Image{Name: name, Labels: labels, Target: target}
	_, err := c.images.Create(ctx, &imagesapi.CreateImageRequest{Image: img})
	if status.Code(err) == codes.AlreadyExists {
		paths := []string{"target"}
		for k := range labels {
			paths = append(paths, "labels."+k)
		}
		_, err = c.images.Update(ctx, &imagesapi.UpdateImageRequest{Image: img, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
	}
	if err != nil {
		return fmt.Errorf("create image %s: %w", name, err)
	}
	return nil
}

// imageTarget is the digest the image record name points at and its
// labels; found is false when there is no such image.
func (c *client) imageTarget(ctx context.Context, name string) (digest string, labels map[string]string, found bool, err error) {
	resp, err := c.images.Get(c.ns(ctx, ""), &imagesapi.GetImageRequest{Name: name})
	if status.Code(err) == codes.NotFound {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("look up image %s: %w", name, err)
	}
	return resp.GetImage().GetTarget().GetDigest(), resp.GetImage().GetLabels(), true, nil
}
