// Command imagetool writes the images tests/oci-conformance serves, and checks a registry's pull
// side beyond what the conformance suite checks for read-only content (the suite cannot know the
// bytes of content it did not push).
//
//	imagetool layout DIR           write an OCI image layout (tags latest and 1.0) into DIR
//	imagetool index DIR            the same with an image per platform (amd64, arm64) in index.json
//	imagetool rootfs DIR           write Concourse's rootfs/ + metadata.json into DIR
//	imagetool push URL NAME DIR    push the layout in DIR to the registry at URL as NAME
//	imagetool check URL NAME       check the image NAME at URL and print the suite's settings
//
// check reads the credentials from IMAGETOOL_USER and IMAGETOOL_PASSWORD, and with -auth also
// checks the refusals of requests without them (IMAGETOOL_DENIED_TOKEN: a token that must get
// 403 DENIED). -want DIGEST is the manifest digest latest must resolve to, -tags "latest 1.0" the
// tags that must resolve to it; -rootfs checks the config and layer made of imagetool rootfs's
// directory. It prints three lines, the tags, manifest digests and blob digests
// for OCI_RO_DATA_TAGS, _MANIFESTS and _BLOBS (empty when latest does not resolve), and exits with
// status 1 after them if any check failed.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "layout":
		need(args, 1)
		writeLayout(args[0], "amd64")
	case "index":
		need(args, 1)
		writeLayout(args[0], "amd64", "arm64")
	case "rootfs":
		need(args, 1)
		writeRootfs(args[0])
	case "push":
		need(args, 3)
		push(args[0], args[1], args[2])
	case "check":
		fs := flag.NewFlagSet("check", flag.ExitOnError)
		auth := fs.Bool("auth", false, "check that requests without the credentials are refused")
		want := fs.String("want", "", "the manifest digest latest must resolve to")
		rootfs := fs.Bool("rootfs", false, "check the config and layer made of imagetool rootfs's directory")
		tags := fs.String("tags", "latest", "space-separated tags that must resolve to latest's manifest")
		must(fs.Parse(args))
		need(fs.Args(), 2)
		c := checker{base: fs.Arg(0), name: fs.Arg(1), user: os.Getenv("IMAGETOOL_USER"),
			pass: os.Getenv("IMAGETOOL_PASSWORD")}
		tagList, manifests, blobs := c.run(*auth, *rootfs, *want, strings.Fields(*tags), os.Getenv("IMAGETOOL_DENIED_TOKEN"))
		fmt.Println(tagList)
		fmt.Println(manifests)
		fmt.Println(blobs)
		if c.failed {
			os.Exit(1)
		}
	default:
		usage()
	}
}

func need(args []string, n int) {
	if len(args) != n {
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: imagetool layout DIR | index DIR | rootfs DIR | push URL NAME DIR | check [-auth] [-rootfs] [-want DIGEST] [-tags TAGS] URL NAME")
	os.Exit(64)
}
