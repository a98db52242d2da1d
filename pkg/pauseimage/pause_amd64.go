package pauseimage

import _ "embed"

// tarball is the pause image for linux/amd64.
//
//go:embed pause_amd64.tar
var tarball []byte
