// Package hub is the controller's side of the runner connection: it keeps the live runner
// connections (one per allocation, admitted so a live one is never replaced), opens operation
// streams on them and runs operations to their trailer (Conn.Call, Conn.CallWithBody), and
// bounds what a runner sends on a stream (IdleReader, CapReader).
package hub
