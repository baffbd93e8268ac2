package api

import "time"

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Name string `json:"name"`
	// Workspaces limits the token to these workspaces (ids or names, recorded as ids); none: it
	// may do whatever the operator token may.
	Workspaces []string `json:"workspaces,omitempty"`
	// TTL is how long the token lasts (a duration, like 24h); "": until revoked.
	TTL string `json:"ttl,omitempty"`
}

// Token is an API token as the API shows it. Its secret is shown once, in the answer to its
// creation; the controller keeps only its hash, which it never shows.
type Token struct {
	Name  string `json:"name"`
	Token string `json:"token,omitempty"` // the secret: only in the answer to POST /v1/tokens
	// Workspaces are the ids of the workspaces it is limited to; empty: not limited.
	Workspaces []string   `json:"workspaces"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	Revoked    bool       `json:"revoked"`
	Expired    bool       `json:"expired"` // as of the controller's clock when it answered
}
