package controller

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of HTTPLimits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 1024
)

// HTTPLimits bounds what clients may hold of the controller's HTTP servers. Anyone who can reach
// the port can open connections before authenticating, so every one of them is bounded in time
// and in number: a connection that sends no request header within ReadHeaderTimeout, or stays
// idle between requests for IdleTimeout, is closed, and past MaxConns the next connection waits
// in the kernel's backlog until one closes.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	// MaxConns caps the connections served at once, hijacked ones (runner and exec websockets)
	// included.
	MaxConns int
}

func (l HTTPLimits) withDefaults() HTTPLimits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// server builds an http.Server bounded by l whose requests' contexts derive from base.
func (l HTTPLimits) server(h http.Handler, base context.Context) *http.Server {
	return &http.Server{
		Handler: h, ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context { return base },
	}
}

// limitListener makes inner accept at most l.MaxConns connections that are open at once.
func (l HTTPLimits) limitListener(inner net.Listener) net.Listener {
	return &limitedListener{Listener: inner, slots: make(chan struct{}, l.MaxConns), closed: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	closeOnce sync.Once
	closed    chan struct{}
}

// Accept waits for a free slot before it accepts, so connections past the cap stay in the
// backlog rather than being accepted and dropped.
func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// slotConn gives its listener slot back on its first Close.
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite keeps the inner connection's half-close for a hijacked connection that carries a
// TCP stream (port-forward): without it the copy could only close the connection whole.
func (c *slotConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// ReadFrom keeps the inner connection's sendfile/splice path for response bodies copied from
// files (snapshot archives): net/http looks for it on the connection it was handed.
func (c *slotConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(c.Conn, r)
}
