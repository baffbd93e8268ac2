// Package store keeps the controller's durable records: workspaces, allocations and runs.
//
// Store is the whole of it, split into role interfaces (Workspaces, Runs, Leases, ...) so that
// code needing one role can say so; package sqlstore implements every role on SQLite and
// PostgreSQL, and package storetest is the suite each driver must pass.
package store
