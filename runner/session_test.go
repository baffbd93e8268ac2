package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// A refusal because the allocation already has a connected runner is retried (it may be this
// runner, back before its old connection was found dead); a refused token ends the runner.
func TestRunnerRetriesBusyAndStopsOnRefusedToken(t *testing.T) {
	var attempts atomic.Int32
	var mu sync.Mutex
	var tokens []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := attempts.Add(1)
		mu.Lock()
		tokens = append(tokens, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n <= 3 {
			w.WriteHeader(protocol.StatusAllocationBusy)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": protocol.Errorf(protocol.CodeUnauthorized, "allocation al_test already has a connected runner")})
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used or replaced")})
	}))
	defer srv.Close()
	r, err := New(Config{ControllerURL: srv.URL, Token: "tss_current", AllocationID: "al_test", Root: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Run: %v; want ErrRefused after the busy answers", err)
	}
	if n := attempts.Load(); n != 4 {
		t.Fatalf("%d connection attempts; want 3 busy ones retried, then the refused one", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tok := range tokens {
		if tok != protocol.Bearer("tss_current") {
			t.Fatalf("attempt with %q", tok)
		}
	}
}

// Every welcome's session token replaces the runner's, and the runner confirms it holds it; a
// hello the controller could not take just now is retried, a refused one is not.
func TestHelloTakesAndConfirmsTheNewToken(t *testing.T) {
	for name, tc := range map[string]struct {
		answer  protocol.Trailer
		refused bool // ErrRefused
		fails   bool
	}{
		"welcome":      {answer: protocol.Trailer{OK: true, Result: json.RawMessage(`{"protocol":1,"workspace_id":"ws_test","session_token":"tss_new","epoch":3}`)}},
		"unauthorized": {answer: protocol.Trailer{Error: protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used or replaced")}, refused: true, fails: true},
		"busy store":   {answer: protocol.Trailer{Error: protocol.Errorf(protocol.CodeInternal, "database is locked")}, fails: true},
	} {
		t.Run(name, func(t *testing.T) {
			r, runnerSide, ctlSide := memRunner(t)
			done := make(chan error, 1)
			go func() { done <- r.hello(context.Background(), runnerSide) }()
			st := accept(t, ctlSide)
			defer st.Close()
			var h protocol.Header
			var hello protocol.Hello
			if err := protocol.ReadJSON(st, &h); err != nil || h.Op != protocol.OpHello {
				t.Fatalf("header %+v, %v", h, err)
			}
			if err := protocol.ReadJSON(st, &hello); err != nil || hello.AllocationID != "al_test" {
				t.Fatalf("hello %+v, %v", hello, err)
			}
			if err := protocol.WriteJSON(st, tc.answer); err != nil {
				t.Fatal(err)
			}
			if tc.answer.OK {
				var ack protocol.WelcomeAck
				if err := protocol.ReadJSON(st, &ack); err != nil {
					t.Fatalf("no welcome ack: %v", err)
				}
				sum := sha256.Sum256([]byte("tss_new"))
				if ack.SessionTokenSHA256 != hex.EncodeToString(sum[:]) {
					t.Fatalf("ack %+v; want the new token's hash", ack)
				}
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("hello did not return")
			}
			if (err != nil) != tc.fails || errors.Is(err, ErrRefused) != tc.refused {
				t.Fatalf("hello: %v", err)
			}
			r.mu.Lock()
			token := r.token
			r.mu.Unlock()
			want := "tbt_x"
			if tc.answer.OK {
				want = "tss_new"
			}
			if token != want {
				t.Fatalf("runner token %q; want %q", token, want)
			}
			if tc.answer.OK && r.epoch.Load() != 3 {
				t.Fatalf("epoch %d after the welcome", r.epoch.Load())
			}
		})
	}
}
