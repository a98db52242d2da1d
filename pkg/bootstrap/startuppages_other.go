//go:build !linux

package bootstrap

import "errors"

func releaseStartupPages() (uint64, error) {
	return 0, errors.New("releasing start-up pages needs Linux")
}
