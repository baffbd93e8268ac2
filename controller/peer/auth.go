package peer

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// HeaderPeer names the controller a call between controllers comes from.
const HeaderPeer = "X-Tether-Peer"

// tokenPrefix marks the credential controllers present to each other: the cluster secret kept
// in the store, which never leaves the controllers (runners and operators never see it).
const tokenPrefix = "tpeer_"

// Authorize makes r a call from the controller self, authenticated with the cluster secret.
func Authorize(h http.Header, self, secret string) {
	h.Set("Authorization", "Bearer "+tokenPrefix+secret)
	h.Set(HeaderPeer, self)
}

// Authenticated says whether r carries the cluster secret, and names the peer it says it is.
func Authenticated(r *http.Request, secret string) (peer string, ok bool) {
	auth, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "+tokenPrefix)
	if !found || secret == "" || subtle.ConstantTimeCompare([]byte(auth), []byte(secret)) != 1 {
		return "", false
	}
	return r.Header.Get(HeaderPeer), true
}

// IsPeerToken says whether a bearer token is shaped as a peer credential (so operator
// authentication can leave it to Authenticated).
func IsPeerToken(token string) bool { return strings.HasPrefix(token, tokenPrefix) }
