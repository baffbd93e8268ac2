// Package protocol holds what the controller and the runner agree on: wire types, operation names,
// error codes, framing, version negotiation and the websocket↔yamux glue.
package protocol
