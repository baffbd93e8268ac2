package gitsource

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"

	"github.com/tetherhq/tether/protocol"
)

func checkSource(s string) error {
	if s == "" || strings.HasPrefix(s, "-") || len(s) > 4096 || hasCtl(s) {
		return protocol.Errorf(protocol.CodeInvalidArgument, "invalid source %q", s)
	}
	return nil
}

// checkRev accepts revisions such as commit ids, branch names, HEAD~2, v1^{commit}; never an
// option, a range, a path (":"), or anything with whitespace.
func checkRev(s string) error {
	if s == "" || len(s) > 1024 || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "^") ||
		strings.Contains(s, "..") || strings.ContainsAny(s, ": ") || hasCtl(s) {
		return protocol.Errorf(protocol.CodeInvalidArgument, "invalid revision %q", s)
	}
	return nil
}

// CheckBranch applies git's ref-name rules (check-ref-format) to a branch name.
func CheckBranch(s string) error {
	// A name that still starts with refs/ after its one refs/heads/ was stripped would name
	// another ref than the one locked and recorded (refs/heads/refs/heads/x is not x).
	bad := s == "" || s == "@" || s == "HEAD" || strings.HasPrefix(s, "refs/") || len(s) > 255 || strings.HasPrefix(s, "-") || hasCtl(s) ||
		strings.ContainsAny(s, " ~^:?*[\\") || strings.Contains(s, "..") || strings.Contains(s, "@{") ||
		strings.HasSuffix(s, ".")
	for _, c := range strings.Split(s, "/") {
		bad = bad || c == "" || strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".lock")
	}
	if bad {
		return protocol.Errorf(protocol.CodeInvalidArgument, "invalid branch name %q", s)
	}
	return nil
}

func hasCtl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

func isHex(s string) bool {
	return len(s) >= 4 && len(s) <= 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// IsLocal follows git's rule: "scheme://" is a URL (file:// being local), "host:path" with the
// colon before any slash is scp-like ssh, anything else is a path.
func IsLocal(s string) bool {
	if strings.HasPrefix(s, "file://") {
		return true
	}
	if strings.Contains(s, "://") {
		return false
	}
	colon, slash := strings.IndexByte(s, ':'), strings.IndexByte(s, '/')
	return colon < 0 || (slash >= 0 && slash < colon)
}

// redact hides a URL's credentials in messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User("***")
		return u.String()
	}
	return s
}

func randHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

func isRandHex(s string) bool {
	return len(s) == 16 && strings.Trim(s, "0123456789abcdef") == ""
}
