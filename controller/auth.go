package controller

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Token prefixes say what a token is when one turns up in a log or a leak report.
const (
	prefixOperator  = "tot_"
	prefixBootstrap = "tbt_"
	prefixSession   = "tss_"
	// prefixAPI starts an API token's secret; longer than the others, so that secret scanners
	// can tell one apart in a log or a repository.
	prefixAPI = "tether_api_"
)

// OperatorTokenFile is the file in the data dir holding the operator token.
const OperatorTokenFile = "operator.token"

func newToken(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG does not fail on Linux
	}
	return prefix + hex.EncodeToString(b)
}

// hashToken is what the store keeps: a leaked database does not leak live tokens.
func hashToken(t string) string {
	s := sha256.Sum256([]byte(t))
	return hex.EncodeToString(s[:])
}

// loadOperatorToken reads DIR/operator.token, creating it (0600) on first start.
func loadOperatorToken(dir string) (string, error) {
	return loadOrCreate(filepath.Join(dir, OperatorTokenFile), func() string { return newToken(prefixOperator) })
}

// loadOrCreate reads the one-line value kept in path, or creates the file (0600, synced) with
// the value newValue makes when it does not exist yet.
func loadOrCreate(path string, newValue func() string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("%s is empty", path)
		}
		return v, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	v := newValue()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(v + "\n"); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	return v, f.Close()
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

// requireOperator guards the operator REST API: the call must carry the operator token or a
// live API token, and who it is from goes with its context (see principal), where the routes'
// guards and the central lookups hold a limited token to its workspaces.
func (s *Server) requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authenticate(r)
		if err != nil {
			writeError(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
	})
}
