// Times google/pprof's profile.Parse (gunzip + protobuf decode + linking) on the given files,
// for comparison with our decode + normalize in the same run (see ../compare_go.rs).
// Built against Debian's golang-github-google-pprof-dev in GOPATH mode:
//   GO111MODULE=off GOPATH=/usr/share/gocode go run parse.go FILE...
// Prints one line per file: path, bytes, samples, nanoseconds per Parse (best of 5 rounds).
package main

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/google/pprof/profile"
)

func main() {
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		p, err := profile.Parse(bytes.NewReader(data))
		if err != nil {
			fmt.Fprintln(os.Stderr, path, err)
			os.Exit(1)
		}
		best := time.Duration(1 << 62)
		for round := 0; round < 5; round++ {
			n := 0
			start := time.Now()
			for time.Since(start) < 400*time.Millisecond {
				if _, err := profile.Parse(bytes.NewReader(data)); err != nil {
					panic(err)
				}
				n++
			}
			if per := time.Since(start) / time.Duration(n); per < best {
				best = per
			}
		}
		fmt.Printf("%s %d %d %d\n", path, len(data), len(p.Sample), best.Nanoseconds())
	}
}
