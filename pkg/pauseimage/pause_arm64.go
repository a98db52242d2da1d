package pauseimage

import _ "embed"

// tarball is the pause image for linux/arm64.
//
//go:embed pause_arm64.tar
var tarball []byte
