// A known workload for the agent's tests: nearly all time in main.main → main.work →
// main.hotLeaf. Build with `go build` (Go keeps frame pointers on amd64). hotLeaf has a local
// array so that it has a frame: Go gives frameless leaves no frame pointer, and the walk would
// skip main.work. Usage: agent-go-hot [SECONDS] (default: an hour).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func hotLeaf(x uint64) uint64 {
	var buf [16]uint64
	for i := 0; i < 200000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		buf[i&15] = x
	}
	return x + buf[x&15]
}

//go:noinline
func work(d time.Duration) {
	start := time.Now()
	x := uint64(1)
	for time.Since(start) < d {
		x = hotLeaf(x)
	}
	sink = x
}

func main() {
	seconds := 3600.0
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			seconds = s
		}
	}
	work(time.Duration(seconds * float64(time.Second)))
}
