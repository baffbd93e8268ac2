package controller

import (
	"context"
	"net/http"
	"slices"

	"github.com/tetherhq/tether/controller/api"
)

func (s *Server) handleCreateProject(w http.ResponseWriter, r *http.Request) {
	var req api.CreateProjectRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.CreateProject(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

// CreateProject records a project once its source was cloned into the managed base clone and
// its base ref found there: a project that cannot be checked out is never recorded.
func (s *Server) CreateProject(ctx context.Context, req api.CreateProjectRequest) (api.Project, error) {
	return s.projects.Create(ctx, req)
}

func (s *Server) handleListProjects(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.ListProjects(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if p := principalOf(r.Context()); p.limited() {
		mine, err := s.visibleProjects(r.Context(), p)
		if err != nil {
			writeError(w, err)
			return
		}
		list = slices.DeleteFunc(list, func(proj api.Project) bool { return !mine[proj.ID] })
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleGetProject(w http.ResponseWriter, r *http.Request) {
	p, err := s.project(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}
