package protocol

// OpTCPDial connects its stream to a TCP port inside the sandbox's own network (Args:
// TCPDialArgs). The runner dials the port on its loopback (127.0.0.1, then ::1) and answers with
// a trailer: Result TCPDialReply once connected, or the error (CodeUnavailable when nothing
// accepts). After a successful trailer the stream carries the connection's bytes both ways, raw.
// Either side closing its half (a yamux FIN) half-closes the connection; the stream ends when both
// halves are closed.
//
// The runner serves any port of its own loopback: which ports may be reached is the
// controller's decision (a workspace's services, and ports its operator names), made before it
// opens the stream. The operation changes nothing in the workspace, so it is not fenced.
const OpTCPDial = "tcp_dial"

// TCPDialArgs names the port to dial.
type TCPDialArgs struct {
	Port int `json:"port"`
}

// TCPDialReply says where the runner connected.
type TCPDialReply struct {
	Addr string `json:"addr"`
}
