// Package project keeps the controller's projects: a Git source checked out into workspaces.
// Each project has a managed base clone on the controller's host (controller/gitsource) that
// only the controller writes; from it come the plan of a project workspace (its mode, branch
// and start point, or the shared branch's workspace to reuse), the pack a new workspace's
// runner checks out, the reconcile of a workspace with its base ref, delivery inspection, and
// the gc of base clones no open workspace uses.
package project
