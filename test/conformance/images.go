package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The images the [Conformance] specs run, under upstream's names
// (k8s.io/kubernetes/test/utils/image, v1.37.2), made from what Build
// built and from Debian packages. What each is made of, and how it differs
// from upstream's, is in docs/CONFORMANCE.md.
const (
	e2eRegistry = "registry.k8s.io/e2e-test-images/"

	ImageAgnhost     = e2eRegistry + "agnhost:2.66.1"
	ImageAgnhostPrev = e2eRegistry + "agnhost:2.55"
	ImageBusybox     = e2eRegistry + "busybox:1.37.0-2"
	ImageGlibcDNS    = e2eRegistry + "glibc-dns-testing:2.1.1"
	ImageNginx       = e2eRegistry + "nginx:1.27.0-2"
	ImageNginxNew    = e2eRegistry + "nginx:1.28.0-2"
	ImageNautilus    = e2eRegistry + "nautilus:1.8"
	ImageKitten      = e2eRegistry + "kitten:1.8"
	ImageNonewprivs  = e2eRegistry + "nonewprivs:1.4"
	ImageNonRoot     = e2eRegistry + "nonroot:1.5"
	ImageSampleAPI   = e2eRegistry + "sample-apiserver:1.29.2"
	ImageEtcd        = "registry.k8s.io/etcd:3.7.0-0"
	ImagePause       = "registry.k8s.io/pause:3.10.2"
)

// Packages are the Debian packages of the images made of them.
var (
	// agnhost upstream is Alpine with bind-tools, curl, netcat-openbsd,
	// iproute2, iperf, bash, util-linux-misc and socat; the rest of its
	// commands are busybox's, /bin/sh included.
	agnhostPackages = []string{"libc-bin", "coreutils", "bash", "bind9-dnsutils", "curl", "netcat-openbsd",
		"iproute2", "iperf", "socat", "util-linux", "procps", "usr-is-merged"}
	// glibc-dns-testing upstream is Debian with dnsutils.
	glibcDNSPackages = []string{"libc-bin", "coreutils", "dash", "bind9-dnsutils", "hostname", "grep", "sed",
		"mawk", "findutils", "usr-is-merged"}
	// nginx upstream is nginx:alpine (busybox for the rest).
	nginxPackages = []string{"libc-bin", "nginx", "usr-is-merged"}
)

// images builds every image that is not in images/ yet.
func (b *Build) images(ctx context.Context) error {
	dir := filepath.Join(b.Dir, "images")
	deb := &Debian{Dir: filepath.Join(b.Dir, "debs"), Logf: b.Logf}
	bb, err := os.ReadFile(b.bin("busybox"))
	if err != nil {
		return err
	}
	applets, err := busyboxApplets(b.bin("busybox"))
	if err != nil {
		return err
	}
	mod, err := b.upstreamModuleDir(ctx)
	if err != nil {
		return err
	}
	// read and upstreamFile note the first file they could not read in
	// fileErr, which fails the image being made.
	var fileErr error
	readFile := func(p string) []byte {
		body, err := os.ReadFile(p)
		if err != nil && fileErr == nil {
			fileErr = err
		}
		return body
	}
	read := func(name string) []byte { return readFile(b.bin(name)) }
	upstreamFile := func(rel string) []byte { return readFile(filepath.Join(mod, rel)) }

	// busyboxRoot is upstream's busybox image: every applet in /bin.
	busyboxRoot := func() *Rootfs {
		r := NewRootfs()
		r.File("bin/busybox", 0o755, bb)
		for _, a := range applets {
			if name := path.Base(a); name != "busybox" {
				r.Symlink("bin/"+name, "busybox")
			}
		}
		basics(r, "")
		return r
	}
	// fillBusybox links the busybox applets a Debian rootfs lacks, as
	// Alpine's busybox provides what its packages do not; /bin/sh is
	// busybox's ash unless keepSh.
	fillBusybox := func(r *Rootfs, keepSh bool) {
		r.File("bin/busybox", 0o755, bb)
		for _, a := range applets {
			name := path.Base(a)
			if name == "busybox" || (name == "sh" && keepSh && r.Has("bin/sh")) {
				continue
			}
			if name != "sh" && hasCommand(r, name) {
				continue
			}
			r.Symlink("bin/"+name, "busybox")
		}
	}
	// agnhostRoot is made once; each agnhost-based image gets a copy.
	var agnhostBase *Rootfs
	agnhostRoot := func(ctx context.Context) (*Rootfs, error) {
		if agnhostBase != nil {
			r := NewRootfs()
			r.Copy(agnhostBase)
			return r, nil
		}
		r, err := deb.Rootfs(ctx, agnhostPackages...)
		if err != nil {
			return nil, err
		}
		fillBusybox(r, false)
		r.File("agnhost", 0o755, read("agnhost"))
		r.Symlink("agnhost-2", "agnhost")
		r.File("coredns", 0o755, read("coredns"))
		r.Dir("uploads", 0o755)
		r.File("localhost.crt", 0o644, upstreamFile("test/images/agnhost/porter/localhost.crt"))
		r.File("localhost.key", 0o600, upstreamFile("test/images/agnhost/porter/localhost.key"))
		r.Symlink("usr/local/bin/iperf", "/usr/bin/iperf")
		basics(r, "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")
		r.File("etc/group", 0o644, []byte(groupFile+"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"))
		agnhostBase = NewRootfs()
		agnhostBase.Copy(r)
		return r, nil
	}
	agnhostImage := func(name, tag string) func(ctx context.Context) (Image, error) {
		return func(ctx context.Context) (Image, error) {
			r, err := agnhostRoot(ctx)
			if err != nil {
				return Image{}, err
			}
			// Each tag its own digest, as upstream's releases differ.
			r.File("etc/agnhost-tag", 0o644, []byte(tag+"\n"))
			return Image{Name: name, Root: r, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}, nil
		}
	}
	webImage := func(name, picture string) func(ctx context.Context) (Image, error) {
		return func(ctx context.Context) (Image, error) {
			r, err := agnhostRoot(ctx)
			if err != nil {
				return Image{}, err
			}
			r.File(picture+".jpg", 0o644, upstreamFile("test/images/"+picture+"/html/"+picture+".jpg"))
			r.File("data.json", 0o644, upstreamFile("test/images/"+picture+"/html/data.json"))
			return Image{Name: name, Root: r, Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}}, nil
		}
	}
	nginxImage := func(name, tag string) func(ctx context.Context) (Image, error) {
		return func(ctx context.Context) (Image, error) {
			r, err := deb.Rootfs(ctx, nginxPackages...)
			if err != nil {
				return Image{}, err
			}
			fillBusybox(r, false)
			basics(r, "nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n")
			r.File("etc/group", 0o644, []byte(groupFile+"nginx:x:101:nginx\n"))
			r.File("etc/nginx/nginx.conf", 0o644, []byte(nginxConf))
			r.File("usr/share/nginx/html/index.html", 0o644, []byte(nginxIndex))
			r.File("etc/nginx-tag", 0o644, []byte(tag+"\n"))
			for _, d := range []string{"var/log/nginx", "var/lib/nginx", "var/cache/nginx", "run"} {
				r.Dir(d, 0o755)
			}
			return Image{Name: name, Root: r, Cmd: []string{"nginx", "-g", "daemon off;"}}, nil
		}
	}
	recipes := []struct {
		name  string
		build func(ctx context.Context) (Image, error)
	}{
		{ImageBusybox, func(context.Context) (Image, error) {
			return Image{Name: ImageBusybox, Root: busyboxRoot(), Cmd: []string{"sh"}}, nil
		}},
		{ImagePause, func(context.Context) (Image, error) {
			r := NewRootfs()
			r.File("pause", 0o755, read("pause"))
			return Image{Name: ImagePause, Root: r, Entrypoint: []string{"/pause"}, User: "65535:65535"}, nil
		}},
		{ImageAgnhost, agnhostImage(ImageAgnhost, "2.66.1")},
		{ImageAgnhostPrev, agnhostImage(ImageAgnhostPrev, "2.55")},
		{ImageNautilus, webImage(ImageNautilus, "nautilus")},
		{ImageKitten, webImage(ImageKitten, "kitten")},
		{ImageGlibcDNS, func(ctx context.Context) (Image, error) {
			r, err := deb.Rootfs(ctx, glibcDNSPackages...)
			if err != nil {
				return Image{}, err
			}
			if !r.Has("bin/sh") {
				r.Symlink("bin/sh", "dash")
			}
			r.File("coredns", 0o755, read("coredns"))
			basics(r, "")
			return Image{Name: ImageGlibcDNS, Root: r, Cmd: []string{"/bin/sh"}}, nil
		}},
		{ImageNginx, nginxImage(ImageNginx, "1.27.0-2")},
		{ImageNginxNew, nginxImage(ImageNginxNew, "1.28.0-2")},
		{ImageNonewprivs, func(context.Context) (Image, error) {
			r := busyboxRoot()
			r.File("usr/local/bin/nnp", 0o4755, read("nnp"))
			return Image{Name: ImageNonewprivs, Root: r, Cmd: []string{"nnp"}}, nil
		}},
		{ImageNonRoot, func(context.Context) (Image, error) {
			return Image{Name: ImageNonRoot, Root: busyboxRoot(), Cmd: []string{"sh"}, User: "1234"}, nil
		}},
		{ImageSampleAPI, func(context.Context) (Image, error) {
			r := busyboxRoot()
			r.File("sample-apiserver", 0o755, read("sample-apiserver"))
			return Image{Name: ImageSampleAPI, Root: r, Entrypoint: []string{"/sample-apiserver"}}, nil
		}},
		{ImageEtcd, func(context.Context) (Image, error) {
			r := busyboxRoot()
			r.File("usr/local/bin/etcd", 0o755, read("etcd"))
			return Image{Name: ImageEtcd, Root: r, Cmd: []string{"/usr/local/bin/etcd"}}, nil
		}},
	}
	for _, rc := range recipes {
		out := filepath.Join(dir, fileName(rc.name))
		if _, err := os.Stat(out); err == nil {
			continue
		}
		begin := time.Now()
		fileErr = nil
		img, err := rc.build(ctx)
		if err == nil {
			err = fileErr
		}
		if err != nil {
			return fmt.Errorf("image %s: %w", rc.name, err)
		}
		if _, err := Write(dir, img); err != nil {
			return fmt.Errorf("image %s: %w", rc.name, err)
		}
		b.Logf("image %s in %s", rc.name, time.Since(begin).Round(time.Second))
	}
	return nil
}

// ImageNames are the images Build makes, sorted.
func ImageNames() []string {
	names := []string{ImageAgnhost, ImageAgnhostPrev, ImageBusybox, ImageGlibcDNS, ImageNginx, ImageNginxNew,
		ImageNautilus, ImageKitten, ImageNonewprivs, ImageNonRoot, ImageSampleAPI, ImageEtcd, ImagePause}
	sort.Strings(names)
	return names
}

// busyboxApplets lists the applets of a busybox binary with their
// installation paths (bin/sh, usr/bin/wget...).
func busyboxApplets(bin string) ([]string, error) {
	out, err := exec.Command(bin, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", bin, err)
	}
	return strings.Fields(string(out)), nil
}

// hasCommand reports whether the rootfs has name in a directory of PATH.
func hasCommand(r *Rootfs, name string) bool {
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin"} {
		if r.Has(d + "/" + name) {
			return true
		}
	}
	return false
}

const passwdFile = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const groupFile = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
wheel:x:10:root
mail:x:12:
www-data:x:33:
operator:x:37:
users:x:100:
nogroup:x:65534:
`

// basics writes the files and directories every image has: users and
// groups (extraUsers appended to upstream busybox's), and the top-level
// directories a container runtime mounts over.
func basics(r *Rootfs, extraUsers string) {
	r.File("etc/passwd", 0o644, []byte(passwdFile+extraUsers))
	r.File("etc/group", 0o644, []byte(groupFile))
	for _, d := range []string{"dev", "proc", "sys", "etc", "var", "home"} {
		if !r.Has(d) {
			r.Dir(d, 0o755)
		}
	}
	r.Dir("tmp", 0o1777)
	r.Dir("root", 0o700)
}

// fileName is the tarball's name in images/.
func fileName(image string) string {
	return strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(image) + ".tar"
}

const nginxConf = `# edgeplane test/conformance: nginx:alpine's defaults, in one file.
user nginx;
worker_processes 1;
error_log /dev/stderr notice;
pid /run/nginx.pid;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /dev/stdout;
    sendfile on;
    keepalive_timeout 65;
    server {
        listen 80;
        listen [::]:80;
        server_name localhost;
        location / {
            root /usr/share/nginx/html;
            index index.html index.htm;
        }
    }
}
`

const nginxIndex = `<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body><h1>Welcome to nginx!</h1></body>
</html>
`
