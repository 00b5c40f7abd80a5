// e2e-go-spans: a Go program whose CPU profiles carry span and trace ids as runtime/pprof
// labels, as OpenTelemetry's Go span profiling (otelpyroscope) puts them, for the end-to-end
// test of span profiles (tests/e2e/spans.rs).
//
// It runs -rounds rounds. Each round is one CPU profile: -spans spans run one after the other,
// each inside pprof.Do with the labels span_id (16 hex digits), trace_id (32 hex digits, one
// trace per round) and handler=/work, burning -burn of CPU in spanWork. The profile is written
// to -out/round-R.pb.gz and pushed to -server's /api/v1/write as process_cpu of job go-spans.
// Span i of round r has span_id %016x of r*1000+i+1 and trace_id %032x of r+1.
//
// Usage: e2e-go-spans -server http://127.0.0.1:PORT -out DIR [-rounds 2] [-spans 5] [-first 0]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

var sink uint64

// spanWork burns CPU for d: the function every span's profile must show.
func spanWork(d time.Duration) {
	end := time.Now().Add(d)
	x := sink
	for time.Now().Before(end) {
		for i := 0; i < 10000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink = x
}

func main() {
	server := flag.String("server", "", "the server's base URL")
	out := flag.String("out", "", "directory for the pushed profiles")
	rounds := flag.Int("rounds", 2, "profiles to push")
	spans := flag.Int("spans", 5, "spans per profile")
	first := flag.Int("first", 0, "number of the first round")
	burn := flag.Duration("burn", 60*time.Millisecond, "CPU per span")
	flag.Parse()
	if *server == "" || *out == "" {
		log.Fatal("-server and -out are required")
	}
	for r := *first; r < *first+*rounds; r++ {
		var buf bytes.Buffer
		if err := pprof.StartCPUProfile(&buf); err != nil {
			log.Fatal(err)
		}
		trace := fmt.Sprintf("%032x", r+1)
		for i := 0; i < *spans; i++ {
			span := fmt.Sprintf("%016x", r*1000+i+1)
			labels := pprof.Labels("span_id", span, "trace_id", trace, "handler", "/work")
			pprof.Do(context.Background(), labels, func(context.Context) { spanWork(*burn) })
		}
		pprof.StopCPUProfile()
		path := filepath.Join(*out, fmt.Sprintf("round-%d.pb.gz", r))
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
		url := *server + "/api/v1/write?__name__=process_cpu&job=go-spans"
		resp, err := http.Post(url, "application/octet-stream", bytes.NewReader(buf.Bytes()))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			log.Fatalf("push of round %d: HTTP %d", r, resp.StatusCode)
		}
		fmt.Printf("round %d: %d spans pushed\n", r, *spans)
	}
}
