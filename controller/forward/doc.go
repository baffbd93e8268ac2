// Package forward carries connections from the controller's clients into sandboxes: which ports
// an operator lets clients reach (Ports), how many connections and bytes a workspace may have in
// flight (Limiter), and the copy that joins a client's connection to one the runner dialed (Join).
//
// The HTTP proxy, preview URLs and port-forward of the controller are built on it; the dial
// itself is the runner's (protocol.OpTCPDial, through hub.Conn.Dial).
package forward
