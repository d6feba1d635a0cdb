// The scripts of the build's steps, the same both ways, and where they work: a resource's check, the
// get of the source and the get of the image (each its own step), the task and the put.

package main

// Where the steps work in their containers, as ATC lays out a build's directories.
const (
	checkDir    = "/tmp/build/check"
	getDir      = "/tmp/build/get"
	getImageDir = "/tmp/build/get-image"
	taskDir     = "/tmp/build/task"
	putDir      = "/tmp/build/put"
	// markerPath is the file only the get's image has: a task that sees it ran in that image.
	markerPath = "/etc/atc-build-marker"
)

// checkScript is a resource's check: it reads ATC's request on stdin and prints one version, the
// number it is given, so that every check's answer can be told apart.
const checkScript = `read -r request || true
case $request in *source*) ;; *) echo "no request on stdin" >&2; exit 1 ;; esac
printf '[{"ref":"%s"}]\n' "$1"`

// getSourceScript is the source resource's in: $1 the directory, $2 the number of source files. It
// writes the tree into the directory itself (src/), as a resource's in writes into its destination,
// then prints the version fetched.
const getSourceScript = `set -e
read -r request || true
cd "$1"
mkdir -p src
i=0
while [ "$i" -lt "$2" ]; do
	printf 'package src\n\n// File %d of the build'"'"'s sources.\nconst F%d = %d\n' "$i" "$i" "$i" > "src/f$i.go"
	i=$((i + 1))
done
printf '{"version":{"ref":"%s"}}\n' "$2"`

// getImageScript is the image resource's in (a registry-image get with format rootfs): $1 the
// directory. It writes rootfs/ (the running image's busybox files and a marker) and metadata.json
// into the directory itself, then prints the version fetched.
const getImageScript = `set -e
read -r request || true
cd "$1"
mkdir -p rootfs/tmp
cp -a /bin /sbin /usr /etc rootfs/
chmod 1777 rootfs/tmp
echo atc-build-image > rootfs` + markerPath + `
echo '{"env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}' > metadata.json
echo '{"version":{"digest":"sha256:atc-build-image"}}'`

// Versions the gets must print: the source's names its number of files.
const imageVersion = `{"version":{"digest":"sha256:atc-build-image"}}`

// taskScript is the task: $1 the directory, $2 the image's root as the task sees it ("" when the
// task runs in the image), $3 the run's number. It checks that it runs in (or has) the get's image,
// reports whether the cache holds an earlier run's stamp, stamps it, and writes a digest of the
// sources to out/.
const taskScript = `set -e
cd "$1"
test -f "$2` + markerPath + `" || { echo "not in the get's image: no $2` + markerPath + `" >&2; exit 1; }
if [ -f cache/stamp ]; then echo "cache: hit $(cat cache/stamp)"; else echo "cache: miss"; fi
echo "run $3" > cache/stamp
n=$(find source/src -type f | wc -l)
find source/src -type f | sort | xargs cat | md5sum | cut -c1-32 > out/sum
echo "$n" > out/files
echo "files: $n"`

// putScript is a resource's out: it reads the task's output and prints the version it "pushed".
const putScript = `set -e
read -r request || true
cd "$1"
test -s out/sum || { echo "no out/sum" >&2; exit 1; }
printf '{"version":{"ref":"%s","files":"%s"}}\n' "$(cut -c1-12 out/sum)" "$(cat out/files)"`

// request is the JSON ATC writes on a resource script's stdin.
const request = `{"source":{"uri":"https://example.com/repo.git"},"version":null}` + "\n"
