// Package runner is the agent inside a sandbox: it dials the controller, keeps one multiplexed
// websocket alive across drops, and carries out the operations the controller opens as streams.
package runner
