package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// Version 7: projects, and what project workspaces, provision/teardown runs and gc sweeps
// record. workspaces.git holds the JSON of api.WorkspaceGit (empty for a workspace of no project);
// project_id and branch copy two of its fields so lookups can use an index.
func init() {
	addMigration(7, "projects, workspace git, reclaim marks, run output",
		`CREATE TABLE projects (
			id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, source TEXT NOT NULL, base_ref TEXT NOT NULL,
			mode TEXT NOT NULL, provision TEXT NOT NULL DEFAULT '[]', teardown TEXT NOT NULL DEFAULT '[]',
			created_at {ts} NOT NULL)`,
		`ALTER TABLE workspaces ADD COLUMN project_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE workspaces ADD COLUMN git TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE workspaces ADD COLUMN branch TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE workspaces ADD COLUMN reclaimed_at {ts} NULL`,
		`CREATE INDEX workspaces_project_branch ON workspaces(project_id, branch)`,
		`ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE runs ADD COLUMN output TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE snapshots ADD COLUMN reclaimed_at {ts} NULL`,
	)
}

// Version 8: one live workspace per project branch, across every controller sharing the store
// (the controller's branch lock covers only its own requests). Failed and deleted workspaces
// give their branch back.
func init() {
	addMigration(8, "one live workspace per project branch",
		`CREATE UNIQUE INDEX workspaces_live_branch ON workspaces(project_id, branch)
			WHERE project_id <> '' AND state <> 'deleted' AND state <> 'failed'`,
	)
}

// liveBranchIndex is the unique index of migration 8.
const liveBranchIndex = "workspaces_live_branch"

// projectNameConstraint is PostgreSQL's name for the UNIQUE constraint on projects.name.
const projectNameConstraint = "projects_name_key"

// workspaceGit returns the columns a workspace's Git record is stored in: its project, its JSON
// (empty when nil) and its branch.
func workspaceGit(g *api.WorkspaceGit) (projectID, git, branch string, err error) {
	if g == nil {
		return "", "", "", nil
	}
	b, err := json.Marshal(g)
	if err != nil {
		return "", "", "", fmt.Errorf("workspace git: %w", err)
	}
	return g.ProjectID, string(b), g.Branch, nil
}

// storableText makes command output storable as TEXT in every database: PostgreSQL refuses
// invalid UTF-8 (a tail cut mid-character, binary output) and NUL bytes, so both become U+FFFD,
// on SQLite too, so the drivers read back the same string.
func storableText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

func jsonList(l []string) (string, error) {
	if l == nil {
		return "[]", nil
	}
	b, err := json.Marshal(l)
	return string(b), err
}

func (s *DB) CreateProject(ctx context.Context, p api.Project) error {
	provision, err := jsonList(p.Provision)
	if err != nil {
		return err
	}
	teardown, err := jsonList(p.Teardown)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT COUNT(*) FROM projects WHERE name = ?`), p.Name).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return protocol.Errorf(protocol.CodeExists, "a project named %q already exists", p.Name)
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO projects (`+projectCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		p.ID, p.Name, p.Source, p.BaseRef, p.Mode, provision, teardown, p.CreatedAt.UTC()); err != nil {
		if s.d.uniqueConstraint(err) == projectNameConstraint { // a concurrent create took the name since the count
			return protocol.Errorf(protocol.CodeExists, "a project named %q already exists", p.Name)
		}
		return fmt.Errorf("insert project: %w", err)
	}
	return tx.Commit()
}

const projectCols = `id, name, source, base_ref, mode, provision, teardown, created_at`

func scanProject(row interface{ Scan(...any) error }) (api.Project, error) {
	var p api.Project
	var provision, teardown string
	if err := row.Scan(&p.ID, &p.Name, &p.Source, &p.BaseRef, &p.Mode, &provision, &teardown, &p.CreatedAt); err != nil {
		return p, err
	}
	p.CreatedAt = p.CreatedAt.UTC()
	if err := json.Unmarshal([]byte(provision), &p.Provision); err != nil {
		return p, fmt.Errorf("project %s provision: %w", p.ID, err)
	}
	if err := json.Unmarshal([]byte(teardown), &p.Teardown); err != nil {
		return p, fmt.Errorf("project %s teardown: %w", p.ID, err)
	}
	return p, nil
}

// GetProject finds a project by id or, failing that, by name.
func (s *DB) GetProject(ctx context.Context, idOrName string) (api.Project, error) {
	p, err := scanProject(s.queryRow(ctx, s.d.q(`SELECT `+projectCols+` FROM projects
		WHERE id = ? OR name = ? ORDER BY id = ? DESC LIMIT 1`), idOrName, idOrName, idOrName))
	if errors.Is(err, sql.ErrNoRows) {
		return p, notFound("project", idOrName)
	}
	return p, err
}

func (s *DB) ListProjects(ctx context.Context) ([]api.Project, error) {
	return queryAll(ctx, s, scanProject, `SELECT `+projectCols+` FROM projects ORDER BY created_at, id`)
}

// ProjectWorkspaces lists the project's workspaces that are not deleted, oldest first. The empty
// project id names no project (it is what workspaces of none record).
func (s *DB) ProjectWorkspaces(ctx context.Context, projectID string) ([]api.Workspace, error) {
	if projectID == "" {
		return []api.Workspace{}, nil
	}
	return queryAll(ctx, s, scanWorkspace, `SELECT `+workspaceCols+workspaceFrom+`
		WHERE w.project_id = ? AND w.state <> 'deleted' ORDER BY w.created_at, w.id`, projectID)
}

// OpenWorkspaceFor finds the newest workspace of the project on branch that is neither deleted
// nor failed.
func (s *DB) OpenWorkspaceFor(ctx context.Context, projectID, branch string) (api.Workspace, bool, error) {
	if projectID == "" {
		return api.Workspace{}, false, nil
	}
	w, err := scanWorkspace(s.queryRow(ctx, s.d.q(`SELECT `+workspaceCols+workspaceFrom+`
		WHERE w.project_id = ? AND w.branch = ? AND w.state NOT IN ('deleted', 'failed')
		ORDER BY w.created_at DESC, w.id DESC LIMIT 1`), projectID, branch))
	if errors.Is(err, sql.ErrNoRows) {
		return api.Workspace{}, false, nil
	}
	if err != nil {
		return api.Workspace{}, false, err
	}
	return w, true, nil
}
