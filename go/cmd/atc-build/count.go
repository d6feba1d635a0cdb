// Counting the bytes that pass through this process, the web node: every connection to the
// apiserver goes through an in-process relay that counts both directions (client-go's requests,
// watches and exec streams alike: its WebSocket dialer ignores rest.Config.Dial, so the count is
// taken at a relay of its own), and every connection to a shim through a counting dialer
// (k8s.Config.DialShim). The counts are of TCP payload: TLS records and HTTP framing included.

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// wireCount counts the bytes of one way's connections.
type wireCount struct {
	n    atomic.Int64
	stop []func()
}

// countingConn is a connection whose reads and writes are added to n.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// Dial dials as the shim client does (10 s timeout, 15 s keepalives), counting the connection.
func (w *wireCount) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &w.n}, nil
}

// Bytes is the count so far.
func (w *wireCount) Bytes() int64 { return w.n.Load() }

// Close stops the relays.
func (w *wireCount) Close() {
	for _, f := range w.stop {
		f()
	}
}

// through is cfg reaching its apiserver through a relay on 127.0.0.1 that counts into w; the TLS
// server name stays the apiserver's.
func (w *wireCount) through(cfg *rest.Config) (*rest.Config, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("the apiserver's address %q: want scheme://host[:port]", cfg.Host)
	}
	target := u.Host
	switch {
	case u.Port() != "":
	case u.Scheme == "http":
		target = net.JoinHostPort(u.Hostname(), "80")
	default:
		target = net.JoinHostPort(u.Hostname(), "443")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(in, target, &w.n)
		}
	}()
	w.stop = append(w.stop, func() { _ = ln.Close() })
	out := rest.CopyConfig(cfg)
	out.Host = u.Scheme + "://" + ln.Addr().String() + u.Path
	if out.TLSClientConfig.ServerName == "" {
		out.TLSClientConfig.ServerName = u.Hostname()
	}
	return out, nil
}

// relay copies in to a new connection to target and back, counting both directions into n; each
// direction's end is passed on as a half close, and both connections close once both have ended.
func relay(in net.Conn, target string, n *atomic.Int64) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(&countingConn{Conn: dst, n: n}, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}
