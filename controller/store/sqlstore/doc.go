// Package sqlstore implements store.Store on database/sql: SQLite (pure Go) is the embedded
// default, PostgreSQL (pgx) serves several controllers. One set of queries serves both (see
// dialect); the schema is a list of numbered migrations (see migrate.go).
package sqlstore
