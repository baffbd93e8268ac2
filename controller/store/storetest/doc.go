// Package storetest is the test suite every store.Store driver must pass (SQLite and
// PostgreSQL). A driver's test calls Run with a function opening an empty store.
//
// The tests sit in one file per role of the store (workspaces.go, runs.go, leases.go, ...);
// Run lists them all, so a driver cannot pass one role and skip another.
package storetest
