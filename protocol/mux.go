package protocol

import (
	"io"
	"net"
	"time"

	"github.com/hashicorp/yamux"
)

// StreamWindow is the per-stream receive window. yamux's 256 KiB default caps one stream at
// window/RTT (about 2.5 MiB/s at 100 ms), far too little for snapshot and output streams. The
// window is also what a receiver may have to buffer per stream, so it is memory: measured with
// `make bench` on a 1 GiB transfer, 16 MiB windows grew the receiving process by ~130 MiB, 2 MiB
// by ~15 MiB at the same loopback throughput. 2 MiB still allows ~40 MiB/s per stream at 50 ms.
const StreamWindow = 2 << 20

// MuxConfig is the yamux configuration both ends use.
func MuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.MaxStreamWindowSize = StreamWindow
	c.AcceptBacklog = 1024
	// The websocket already pings; a second keepalive layer would only add traffic.
	c.EnableKeepAlive = false
	c.ConnectionWriteTimeout = 30 * time.Second
	c.StreamOpenTimeout = 30 * time.Second
	c.StreamCloseTimeout = 5 * time.Minute
	c.LogOutput = io.Discard
	return c
}

// Dialer side (the runner) runs the yamux client; the controller runs the server. Either side may
// open streams afterwards.
func MuxClient(conn net.Conn) (*yamux.Session, error) { return yamux.Client(conn, MuxConfig()) }

// ServerAcceptBacklog bounds the streams a runner may open that the controller has not accepted
// yet; yamux resets the ones beyond it. Each holds at most yamux's initial 256 KiB window until it
// is accepted, so the backlog costs at most 16 MiB per runner.
const ServerAcceptBacklog = 64

// MuxServer is the controller's end of a runner connection.
func MuxServer(conn net.Conn) (*yamux.Session, error) {
	c := MuxConfig()
	c.AcceptBacklog = ServerAcceptBacklog
	return yamux.Server(conn, c)
}
