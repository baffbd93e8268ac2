package api

import "time"

// RetentionPolicy says which receipts of a workspace prune keeps, restic-like: the newest
// KeepLast, and the newest receipt of each of the last KeepHourly hours and KeepDaily days (UTC)
// that have one. The newest receipt is always kept. All zero keeps everything.
type RetentionPolicy struct {
	KeepLast   int `json:"keep_last,omitempty"`
	KeepHourly int `json:"keep_hourly,omitempty"`
	KeepDaily  int `json:"keep_daily,omitempty"`
}

// Empty reports whether the policy keeps everything (no rule set).
func (p RetentionPolicy) Empty() bool { return p == RetentionPolicy{} }

// PruneRequest is the body of POST /v1/workspaces/{id}/snapshots/prune. A request with no
// policy applies the controller's default one (tether serve --keep-*).
type PruneRequest struct {
	Policy RetentionPolicy `json:"policy"`
	DryRun bool            `json:"dry_run,omitempty"`
}

// PruneItem is one receipt a prune looked at; Rules name what kept it (last, hourly, daily,
// newest), empty for a removed one.
type PruneItem struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"`
	Rules     []string  `json:"rules,omitempty"`
}

// PruneResult answers a prune: the receipts kept and those removed (or, on a dry run, that would
// be). Their objects are freed by the next gc, unless another live receipt needs them.
type PruneResult struct {
	WorkspaceID string          `json:"workspace_id"`
	Policy      RetentionPolicy `json:"policy"`
	DryRun      bool            `json:"dry_run"`
	Kept        []PruneItem     `json:"kept"`
	Removed     []PruneItem     `json:"removed"`
}

// PurgeResult answers DELETE /v1/workspaces/{id}?purge=true: the deleted workspace and the
// receipts removed with it.
type PurgeResult struct {
	Workspace Workspace `json:"workspace"`
	Removed   []string  `json:"removed"`
}

// StorageFigure is a number of snapshot objects and their bytes, as the blob store lists them.
type StorageFigure struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// WorkspaceStorage is what one workspace alone keeps stored: the objects only its receipts need.
type WorkspaceStorage struct {
	WorkspaceID string         `json:"workspace_id"`
	Name        string         `json:"name"`
	State       WorkspaceState `json:"state"`
	StorageFigure
}

// StorageUsage answers GET /v1/storage: stored snapshot objects by who needs them. Shared ones
// are needed by receipts of several workspaces; Unreferenced ones by no live receipt (the next
// gc frees them); InFlight ones by no receipt yet but pinned by a running capture or read.
type StorageUsage struct {
	Workspaces   []WorkspaceStorage `json:"workspaces"`
	Shared       StorageFigure      `json:"shared"`
	Unreferenced StorageFigure      `json:"unreferenced"`
	InFlight     StorageFigure      `json:"in_flight"`
	Total        StorageFigure      `json:"total"`
}
