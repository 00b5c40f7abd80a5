// e2e-go-client: Go's own HTTP client (net/http, HTTP/2 over TLS as Go agents and gRPC
// clients speak it) for the end-to-end tests of the server's refusals. It sends the same
// request -n times, one after another on one keep-alive connection, and prints one JSON line
// per request: the status and protocol it read, or the error Go's transport reported instead.
//
//	e2e-go-client -url https://127.0.0.1:7070/api/v1/write?__name__=x -ca ca.pem \
//	    -body profile.pb.gz [-user alice -password s3cret] [-n 20]
//
// Stdlib only: it builds with GO111MODULE=off and nothing else.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

type result struct {
	Status int    `json:"status"`
	Proto  string `json:"proto"`
	Body   string `json:"body"`
	Error  string `json:"error,omitempty"`
}

func main() {
	url := flag.String("url", "", "the URL to POST to")
	caFile := flag.String("ca", "", "PEM file of the CA that signed the server's certificate")
	bodyFile := flag.String("body", "", "file whose bytes are the request body")
	user := flag.String("user", "", "basic auth user (none when empty)")
	password := flag.String("password", "", "basic auth password")
	n := flag.Int("n", 20, "how many requests")
	flag.Parse()

	ca, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatalf("read -ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		log.Fatalf("-ca %s holds no PEM certificate", *caFile)
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatalf("read -body: %v", err)
	}
	client := &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			ForceAttemptHTTP2: true,
		},
	}
	out := json.NewEncoder(os.Stdout)
	for i := 0; i < *n; i++ {
		req, err := http.NewRequest(http.MethodPost, *url, bytes.NewReader(body))
		if err != nil {
			log.Fatalf("request: %v", err)
		}
		if *user != "" {
			req.SetBasicAuth(*user, *password)
		}
		var r result
		resp, err := client.Do(req)
		if err != nil {
			r.Error = err.Error()
		} else {
			answer, readErr := io.ReadAll(resp.Body)
			resp.Body.Close()
			r.Status, r.Proto, r.Body = resp.StatusCode, resp.Proto, string(answer)
			if readErr != nil {
				r.Error = "reading the answer: " + readErr.Error()
			}
		}
		if err := out.Encode(r); err != nil {
			log.Fatalf("write: %v", err)
		}
	}
}
