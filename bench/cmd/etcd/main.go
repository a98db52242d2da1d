// Command etcd is upstream etcd (go.etcd.io/etcd/server/v3 etcdmain, the
// version in go.mod), built inside this module for the benchmark's baseline.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
