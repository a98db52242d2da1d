//go:build !amd64 && !arm64 && !arm

package pauseimage

// tarball is empty: edgeplane ships no pause image for this architecture.
var tarball []byte
