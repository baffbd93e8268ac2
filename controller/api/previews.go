package api

import "time"

// PreviewRequest is the body of POST /v1/workspaces/{id}/services/{name}/previews.
type PreviewRequest struct {
	// TTL is how long the link works, a duration like 30m (default 1h, at most 7 days).
	TTL string `json:"ttl,omitempty"`
}

// Preview is a preview link of a service: a URL a browser opens without the operator token,
// until it expires or is revoked. The URL (and so its token) is shown once, when it is made.
type Preview struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	Service     string `json:"service"`
	// URL is the link: on the preview listener's host of its own (its entry, pv-ID.DOMAIN/__tether/enter?t=SECRET) when the
	// controller has one, else PathURL.
	URL string `json:"url,omitempty"`
	// PathURL is the link on the controller's own address (/p/{token}/).
	PathURL   string     `json:"path_url,omitempty"`
	State     string     `json:"state"` // live, expired or revoked
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// PreviewsRevoked answers DELETE /v1/workspaces/{id}/services/{name}/previews.
type PreviewsRevoked struct {
	Revoked int `json:"revoked"`
}
