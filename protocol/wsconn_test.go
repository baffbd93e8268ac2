package protocol

import (
	"testing"

	"github.com/hashicorp/yamux"
)

// Small writes return before they are sent; what was written just before Close (a refusal, a
// last trailer) must still reach the peer.
func TestWritesBeforeCloseArrive(t *testing.T) {
	for i := range 50 {
		sess, _ := muxPair(t, func(sess *yamux.Session, conn *WSConn) {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			var h Header
			if ReadJSON(st, &h) != nil {
				return
			}
			_ = WriteJSON(st, Trailer{Error: Errorf(CodeUnauthorized, "refused %d", i)})
			sess.Close()
			conn.Close()
		})
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(st, Header{Op: "hello"}); err != nil {
			t.Fatal(err)
		}
		var tr Trailer
		if err := ReadJSON(st, &tr); err != nil {
			t.Fatalf("round %d: the answer written before Close was lost: %v", i, err)
		}
		if tr.Error == nil || tr.Error.Code != CodeUnauthorized {
			t.Fatalf("round %d: %+v", i, tr)
		}
	}
}
