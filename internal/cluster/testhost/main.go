// Command testhost is the tests' tool in a pod of a real node (built and
// served as cluster.TestHostImage):
//
//	testhost connect HOST:PORT    open a TCP connection, say from where, exit 0
//	testhost get [-every D] [-timeout D] [-count N] [-insecure] URL
//	                              GET URL every D, one line per call on stdout
//
// get keeps its connections as Go's default transport does (keep-alive,
// HTTP/2 when TLS offers it): the client a controller's agents run. Each
// line is "<RFC 3339 time it was sent> <how long it took> <status code or
// error> <first line of the body, or the error>" (cluster.ParseTestHostLog
// reads it).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "connect":
		err = connect(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testhost:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testhost connect HOST:PORT | testhost get [-every D] [-timeout D] [-count N] [-insecure] URL")
	os.Exit(2)
}

func connect(args []string) error {
	fs := flag.NewFlagSet("connect", flag.ExitOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "how long the connection may take")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	c, err := net.DialTimeout("tcp", fs.Arg(0), *timeout)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	fmt.Printf("connected to %s from %s\n", c.RemoteAddr(), c.LocalAddr())
	return nil
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	every := fs.Duration("every", 100*time.Millisecond, "time between two calls")
	timeout := fs.Duration("timeout", 2*time.Second, "time a call may take")
	count := fs.Int("count", 0, "calls to make; 0: until stopped")
	insecure := fs.Bool("insecure", false, "accept any server certificate")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: *insecure} //nolint:gosec // a test's choice, off by default
	c := &http.Client{Transport: tr, Timeout: *timeout}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; *count == 0 || i < *count; i++ {
		began := time.Now()
		res := call(c, fs.Arg(0))
		if _, err := fmt.Fprintf(out, "%s %s %s\n", began.UTC().Format(time.RFC3339Nano), time.Since(began), res); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
		time.Sleep(time.Until(began.Add(*every)))
	}
	return nil
}

// call makes one GET: "200 <first line of the body>" or "error <why>".
func call(c *http.Client, url string) string {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return "error " + err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return "error " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return fmt.Sprintf("%d %s", resp.StatusCode, line)
}
