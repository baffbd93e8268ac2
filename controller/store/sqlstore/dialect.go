package sqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
)

// dialect is what differs between the SQL databases the store runs on. Queries are written once,
// with `?` placeholders and the SQL both databases share (TRUE/FALSE literals, CAST(? AS TEXT),
// partial unique indexes); migrations name column types with the tokens of dialect.types.
type dialect struct {
	name string
	// dollar rewrites `?` placeholders as $1, $2, … (PostgreSQL).
	dollar bool
	// types replaces the type tokens of migration statements: {ts} (a timestamp, stored in UTC),
	// {bool}, {false} (its default) and {int64}.
	types *strings.Replacer
	// forUpdate is appended to a SELECT whose row the transaction goes on to update.
	forUpdate string
	// lock serializes migrations between processes sharing the database, inside the migration
	// transaction (SQLite's BEGIN IMMEDIATE already does).
	lock func(ctx context.Context, tx *sql.Tx) error
	// uniqueConstraint names the unique constraint or index err violated, or returns "".
	uniqueConstraint func(err error) string
	// shared is true for a database several controller processes share (PostgreSQL): cluster
	// locks are then the database's session locks and allocation changes reach watchers through
	// it (LISTEN/NOTIFY). SQLite's database belongs to one process, so both stay in the process.
	shared bool
	// announce turns an UPDATE of allocations into a statement that returns the ids of the rows
	// it changed and, where the database carries notifications, announces each to watchers.
	announce func(update string) string

	rebound sync.Map // query → rewritten query
}

var sqliteDialect = &dialect{
	name:  "sqlite",
	types: strings.NewReplacer("{ts}", "TIMESTAMP", "{bool}", "INTEGER", "{false}", "0", "{int64}", "INTEGER"),
	lock:  func(context.Context, *sql.Tx) error { return nil },
	// Writers are serialized: checks inside a transaction hold.
	uniqueConstraint: func(error) string { return "" },
	// The ids are sent to this process's watchers by the caller (changeAllocations).
	announce: func(update string) string { return update + ` RETURNING id` },
}

// q rewrites a query written with `?` placeholders for d. Question marks inside '…' literals are
// left alone; the store's queries have no other quoting or comments.
func (d *dialect) q(query string) string {
	if !d.dollar {
		return query
	}
	if r, ok := d.rebound.Load(query); ok {
		return r.(string)
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n, quoted := 0, false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	r := b.String()
	d.rebound.Store(query, r)
	return r
}
