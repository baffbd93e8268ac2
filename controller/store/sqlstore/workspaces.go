package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

func (s *DB) CreateWorkspace(ctx context.Context, w api.Workspace, a store.Allocation) error {
	if !wsstate.Known(w.State) {
		return protocol.Errorf(protocol.CodeInvalidArgument, "workspace %s: unknown state %q", w.ID, w.State)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT COUNT(*) FROM workspaces WHERE name = ? AND state <> 'deleted'`), w.Name).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return protocol.Errorf(protocol.CodeExists, "a workspace named %q already exists", w.Name)
	}
	projectID, git, branch, err := workspaceGit(w.Git)
	if err != nil {
		return err
	}
	if projectID != "" {
		if err := tx.QueryRowContext(ctx, s.d.q(`SELECT COUNT(*) FROM workspaces WHERE project_id = ? AND branch = ?
			AND state <> 'deleted' AND state <> 'failed'`), projectID, branch).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return branchTaken(branch)
		}
	}
	var every sql.NullInt64
	if w.CheckpointEvery != nil {
		every = sql.NullInt64{Int64: int64(*w.CheckpointEvery), Valid: true}
	}
	idleAction, idleAfter := idleColumns(w.IdlePolicy)
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO workspaces (id, name, provider, state, reason, allocation_id, project_id, git, branch, created_at, updated_at, checkpoint_every, idle_action, idle_after)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), w.ID, w.Name, w.Provider, string(w.State), w.Reason, w.AllocationID, projectID, git, branch,
		w.CreatedAt.UTC(), w.UpdatedAt.UTC(), every, idleAction, idleAfter); err != nil {
		switch s.d.uniqueConstraint(err) { // a concurrent create got there since the counts
		case "workspaces_live_name":
			return protocol.Errorf(protocol.CodeExists, "a workspace named %q already exists", w.Name)
		case liveBranchIndex:
			return branchTaken(branch)
		}
		return fmt.Errorf("insert workspace: %w", err)
	}
	if err := s.insertAllocation(ctx, tx, a); err != nil {
		return err
	}
	if err := s.addEvent(ctx, tx, w.ID, "", w.State, "created", w.CreatedAt.UTC()); err != nil {
		return err
	}
	return tx.Commit()
}

// workspaceCols are the columns scanWorkspace reads, from workspaces w joined with its current
// allocation a.
const workspaceCols = `w.id, w.name, w.provider, w.state, w.reason, w.allocation_id, COALESCE(a.root, ''), w.epoch,
	w.git, w.reclaimed_at, w.created_at, w.updated_at, w.checkpoint_every, w.checkpoint_at,
	COALESCE(w.source_dir, ''), COALESCE(w.source_base, ''), w.idle_action, w.idle_after, w.active_at,
	COALESCE(w.parent_workspace, ''), COALESCE(w.parent_snapshot, '')`

// workspaceFrom is the FROM clause every workspaceCols query uses.
const workspaceFrom = ` FROM workspaces w LEFT JOIN allocations a ON a.id = w.allocation_id `

func branchTaken(branch string) error {
	return protocol.Errorf(protocol.CodeConflict, "branch %q already has a live workspace in this project", branch)
}

func scanWorkspace(row interface{ Scan(...any) error }) (api.Workspace, error) {
	var w api.Workspace
	var git string
	var reclaimed, checked sql.NullTime
	var every, idleAfter sql.NullInt64
	var idleAction sql.NullString
	var active sql.NullTime
	var parent api.WorkspaceParent
	if err := row.Scan(&w.ID, &w.Name, &w.Provider, &w.State, &w.Reason, &w.AllocationID, &w.Root, &w.Epoch,
		&git, &reclaimed, &w.CreatedAt, &w.UpdatedAt, &every, &checked, &w.SourceDir, &w.SourceBase,
		&idleAction, &idleAfter, &active, &parent.Workspace, &parent.Snapshot); err != nil {
		return w, err
	}
	if parent.Workspace != "" {
		w.Parent = &parent
	}
	if idleAction.Valid {
		w.IdlePolicy = &api.IdlePolicy{Action: idleAction.String, After: protocol.Duration(idleAfter.Int64)}
	}
	w.LastActivityAt = timePtr(active)
	if every.Valid {
		d := protocol.Duration(every.Int64)
		w.CheckpointEvery = &d
	}
	w.LastCheckpointAt = timePtr(checked)
	w.CreatedAt, w.UpdatedAt = w.CreatedAt.UTC(), w.UpdatedAt.UTC()
	w.ReclaimedAt = timePtr(reclaimed)
	if git != "" {
		w.Git = new(api.WorkspaceGit)
		if err := json.Unmarshal([]byte(git), w.Git); err != nil {
			return w, fmt.Errorf("workspace %s git: %w", w.ID, err)
		}
	}
	return w, nil
}

func (s *DB) GetWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	w, err := scanWorkspace(s.queryRow(ctx, s.d.q(`SELECT `+workspaceCols+workspaceFrom+`
		WHERE w.id = ? OR (w.name = ? AND w.state <> 'deleted')
		ORDER BY w.id = ? DESC LIMIT 1`), id, id, id))
	if errors.Is(err, sql.ErrNoRows) {
		return w, notFound("workspace", id)
	}
	return w, err
}

func (s *DB) ListWorkspaces(ctx context.Context, all bool) ([]api.Workspace, error) {
	return queryAll(ctx, s, scanWorkspace, `SELECT `+workspaceCols+workspaceFrom+`
		WHERE ? OR w.state <> 'deleted' ORDER BY w.created_at, w.id`, all)
}

// TransitionWorkspace makes the transition of ev (see wsstate) in one transaction. The row is
// read locked (PostgreSQL FOR UPDATE; SQLite's transactions hold the write lock from their start)
// so the event names the state actually left, and the UPDATE is guarded by the event's from
// states, so of any number of racing transitions from one state exactly one wins.
func (s *DB) TransitionWorkspace(ctx context.Context, id string, ev wsstate.Event, reason, cause string) error {
	t, ok := wsstate.Lookup(ev)
	if !ok {
		return protocol.Errorf(protocol.CodeInvalidArgument, "workspace %s: no transition %q in the state machine", id, ev)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var cur api.WorkspaceState
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT state FROM workspaces WHERE id = ?`+s.d.forUpdate), id).Scan(&cur); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("workspace", id)
		}
		return err
	}
	conflict := func() error {
		from := make([]string, len(t.From))
		for i, f := range t.From {
			from[i] = string(f)
		}
		return protocol.Errorf(protocol.CodeConflict, "workspace %s is %s, not %s (%s)", id, cur, strings.Join(from, " or "), ev)
	}
	if !t.Allows(cur) {
		return conflict()
	}
	now := s.now()
	args := []any{string(t.To), reason, now, id}
	for _, f := range t.From {
		args = append(args, string(f))
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(t.From)), ", ")
	res, err := tx.ExecContext(ctx, s.d.q(`UPDATE workspaces SET state = ?, reason = ?, updated_at = ? WHERE id = ? AND state IN (`+in+`)`), args...)
	if err != nil {
		return fmt.Errorf("transition workspace: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return conflict() // not reached while the row is locked; the guard makes it safe anyway
	}
	if err := s.addEvent(ctx, tx, id, cur, t.To, cause, now); err != nil {
		return err
	}
	return tx.Commit()
}

// SetWorkspaceReclaimed records the time of the latest sweep that reclaimed the workspace. It is
// not a change of the workspace's state: updated_at stays.
func (s *DB) SetWorkspaceReclaimed(ctx context.Context, id string, at time.Time) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE workspaces SET reclaimed_at = ? WHERE id = ?`), at.UTC(), id)
	return affected(res, err, "workspace", id)
}
