// Package peer is how the controllers sharing one store work as one: membership (each
// controller's heartbeat in the store, and whether a peer's is recent enough to act on),
// authenticated calls between controllers, and the tunnel through which a controller reaches a
// runner whose websocket another controller holds.
//
// A runner dials whichever controller the load balancer picks, and that controller — the
// allocation's owner, recorded in the store — holds its connection. Any other controller that
// must talk to the runner opens a tunnel to the owner: one websocket per allocation carrying a
// yamux session whose streams the owner splices, byte for byte, onto streams of the runner's own
// session. Operation headers, bodies and trailers pass through untouched, so the caller keeps
// every bound it applies to a runner it holds itself; the owner reads nothing of them.
package peer
