package pauseimage

import _ "embed"

// tarball is the pause image for linux/arm.
//
//go:embed pause_arm.tar
var tarball []byte
