package project

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/gitsource"
)

// GCBaseClone removes a project's base clone when every workspace of the project has been
// closed (or deleted) since before cutoff: reopen restores from receipts. The next workspace or
// inspection clones it again.
func (s *Projects) GCBaseClone(ctx context.Context, projectID string, cutoff time.Time, swept map[string]bool, dryRun bool) (*api.GCCandidate, error) {
	p, err := s.store.GetProject(ctx, projectID)
	if err != nil {
		return nil, nil
	}
	unlock := s.locks.lock(p.ID)
	defer unlock()
	dir := s.baseClonePath(p.ID)
	if _, err := (&gitsource.Repo{Dir: dir}).Size(); err != nil {
		return nil, nil // no base clone on disk
	}
	wss, err := s.store.ProjectWorkspaces(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	cand := &api.GCCandidate{WorkspaceID: "", Name: "base clone of project " + p.Name}
	for _, ws := range wss {
		switch ws.State {
		case api.StateClosed, api.StateDeleted, api.StateFailed:
			if !swept[ws.ID] && ws.UpdatedAt.After(cutoff) {
				cand.Why = fmt.Sprintf("workspace %s was %s within the grace", ws.Name, ws.State)
				return cand, nil
			}
		default:
			cand.Why = fmt.Sprintf("still used by workspace %s (%s)", ws.Name, ws.State)
			return cand, nil
		}
	}
	size, _ := (&gitsource.Repo{Dir: dir}).Size()
	cand.Reclaimable, cand.Bytes, cand.Why = true, size, "no open workspace uses it"
	if dryRun {
		return cand, nil
	}
	if err := gitsource.Remove(filepath.Dir(dir)); err != nil {
		return cand, err
	}
	cand.Reclaimed = true
	return cand, nil
}
