// A known workload for the agent's frame-pointer walk: nearly all time in main.main →
// main.work → main.frameless, a leaf that Go gives no frame (no locals, no calls), so rbp
// still holds main.work's frame pointer while it runs and a plain frame-pointer walk would
// skip main.work. Usage: agent-go-frameless [SECONDS] (default: an hour).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func frameless(x uint64) uint64 {
	for i := 0; i < 200000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func work(d time.Duration) {
	start := time.Now()
	x := uint64(1)
	for time.Since(start) < d {
		x = frameless(x)
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
