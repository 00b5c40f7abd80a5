// e2e-go-target: a small Go program for the end-to-end tests of the server. It serves Go's
// net/http/pprof on the address given by -addr and keeps a few recognisable functions busy,
// so that every default profile (CPU, allocs, block, mutex, goroutine) names them:
//
//	main.goHotHash        CPU: sha256 in a loop (labelled e2e_worker=hash)
//	main.goHotSort        CPU and allocations: sorts fresh slices (labelled e2e_worker=sort)
//	main.goHotAlloc       allocations that are kept for a while
//	main.goHotLock        mutex contention
//	main.goHotChanWait    block profile: waits on an unbuffered channel
//
// Each busy loop works a fraction (-duty) of the time, so the program stays small on a
// two-core machine. Stdlib only: it builds with GO111MODULE=off and nothing else.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"log"
	"math/rand"
	"net/http"
	_ "net/http/pprof"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"time"
)

var duty = 0.1

// pace sleeps so that the work just done is `duty` of the wall time.
func pace(started time.Time) {
	worked := time.Since(started)
	time.Sleep(time.Duration(float64(worked) * (1 - duty) / duty))
}

//go:noinline
func goHotHash(buf []byte) {
	for i := 0; i < 300; i++ {
		sum := sha256.Sum256(buf)
		copy(buf, sum[:])
	}
}

//go:noinline
func goHotSort(r *rand.Rand) float64 {
	xs := make([]float64, 20000)
	for i := range xs {
		xs[i] = r.Float64()
	}
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

var (
	keptMu sync.Mutex
	kept   [][]byte
)

//go:noinline
func goHotAlloc(r *rand.Rand) {
	b := make([]byte, 1024+r.Intn(64<<10))
	keptMu.Lock()
	if len(kept) < 512 {
		kept = append(kept, b)
	} else {
		kept[r.Intn(len(kept))] = b
	}
	keptMu.Unlock()
}

var shared struct {
	sync.Mutex
	n int
}

//go:noinline
func goHotLock() {
	for i := 0; i < 50; i++ {
		shared.Lock()
		for j := 0; j < 2000; j++ {
			shared.n += j
		}
		shared.Unlock()
	}
}

//go:noinline
func goHotChanWait(ch chan int) int {
	return <-ch
}

func loop(ctx context.Context, work func()) {
	for ctx.Err() == nil {
		t := time.Now()
		work()
		pace(t)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6060", "listen address")
	flag.Float64Var(&duty, "duty", duty, "fraction of wall time each busy loop works, in (0, 1]")
	flag.Parse()
	if duty <= 0 || duty > 1 {
		log.Fatalf("-duty must be in (0, 1], got %v", duty)
	}
	runtime.SetBlockProfileRate(1)
	runtime.SetMutexProfileFraction(1)

	ctx := context.Background()
	labelled := func(worker string, f func(context.Context)) {
		go pprof.Do(ctx, pprof.Labels("e2e_worker", worker), f)
	}
	labelled("hash", func(ctx context.Context) {
		buf := make([]byte, 4096)
		loop(ctx, func() { goHotHash(buf) })
	})
	labelled("sort", func(ctx context.Context) {
		r := rand.New(rand.NewSource(1))
		loop(ctx, func() { goHotSort(r) })
	})
	go func() {
		r := rand.New(rand.NewSource(2))
		loop(ctx, func() {
			for i := 0; i < 100; i++ {
				goHotAlloc(r)
			}
		})
	}()
	for i := 0; i < 3; i++ {
		go loop(ctx, goHotLock)
	}
	ch := make(chan int)
	go func() {
		for i := 0; ; i++ {
			time.Sleep(time.Millisecond)
			ch <- i
		}
	}()
	go func() {
		for {
			goHotChanWait(ch)
		}
	}()

	log.Printf("e2e-go-target %s serving net/http/pprof on http://%s/debug/pprof/", runtime.Version(), *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
