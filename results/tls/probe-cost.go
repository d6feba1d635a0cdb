// probe-cost: what a kubelet readiness probe costs in CPU, the prober's and the shim's, per probe:
// N probes one after another the way the kubelet's prober makes them (a new connection each time,
// no keep-alive, no certificate check), as an HTTP or HTTPS GET, or as a bare TCP connection.
//
//	go run results/tls/probe-cost.go URL SHIM_PID N
//
// URL is http://HOST:PORT/healthz, https://HOST:PORT/healthz or tcp://HOST:PORT; SHIM_PID is the
// pid of the shim listening there (its CPU is read from /proc/PID/stat before and after).
package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: probe-cost URL SHIM_PID N")
		os.Exit(2)
	}
	url, pid := os.Args[1], os.Args[2]
	n, err := strconv.Atoi(os.Args[3])
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "probe-cost: N must be a positive number")
		os.Exit(2)
	}
	probe := httpProbe(url)
	if addr, ok := strings.CutPrefix(url, "tcp://"); ok {
		probe = func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				err = c.Close()
			}
			return err
		}
	}
	self0, shim0, start := selfCPU(), procCPU(pid), time.Now()
	for range n {
		if err := probe(); err != nil {
			fmt.Fprintln(os.Stderr, "probe-cost:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("%s: %d probes in %.2f s; CPU per probe: prober %.0f µs, shim %.0f µs\n", url, n,
		time.Since(start).Seconds(), (selfCPU()-self0)/float64(n)*1e6, (procCPU(pid)-shim0)/float64(n)*1e6)
}

// httpProbe is a GET of url as the kubelet's prober makes it.
func httpProbe(url string) func() error {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
	c := &http.Client{Transport: tr, Timeout: time.Second}
	return func() error {
		r, err := c.Get(url)
		if err != nil {
			return err
		}
		if r.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s answered %s", url, r.Status)
		}
		r.Body.Close()
		return err
	}
}

// procCPU is the user and system CPU seconds of process pid (clock ticks of 10 ms).
func procCPU(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe-cost:", err)
		os.Exit(1)
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return float64(utime+stime) / 100
}

// selfCPU is this process's user and system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
