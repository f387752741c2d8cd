// Command release builds a runnerfleet release into a directory (see
// charts/release); hack/release.sh and make image run it.
//
//	go run ./hack/release --version v0.1.0 --out dist/v0.1.0 [--arch amd64,arm64] [--images-only] [--only runnerset-controller]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/runnerfleet/runnerfleet/charts/release"
)

func main() {
	var o release.Options
	var only, arches string
	flag.StringVar(&o.Root, "root", ".", "the repository checkout")
	flag.StringVar(&o.Out, "out", "dist", "the release directory")
	flag.StringVar(&o.Version, "version", "", "the version stamped into the binaries and tagging the images")
	flag.StringVar(&o.Commit, "commit", "", "the commit stamped into the binaries")
	flag.StringVar(&o.Registry, "registry", "", "the registry and namespace of the images (default the release's)")
	flag.StringVar(&arches, "arch", strings.Join(release.Arches, ","), "comma-separated architectures of the images, each image an OCI image index of them (make image: this machine's)")
	flag.StringVar(&only, "only", "", "comma-separated images and downloads to build, by binary or file name (runnerset-controller, fleet-agent.exe; default all)")
	flag.BoolVar(&o.ImagesOnly, "images-only", false, "build the images only")
	flag.Parse()
	o.Arches = strings.Split(arches, ",")
	if only != "" {
		o.Only = strings.Split(only, ",")
	}
	o.Log = os.Stderr
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	rep, err := release.Build(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, img := range rep.Images {
		fmt.Printf("%-22s %s\n", img.Binary, img.Pinned)
		for _, p := range img.Platforms {
			fmt.Printf("  %-20s %s %6.1f MB\n", p.Platform, p.Digest, float64(p.Size)/1e6)
		}
	}
	for _, f := range rep.Files {
		fmt.Println(f)
	}
}
