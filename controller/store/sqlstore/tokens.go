package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Version 11: API tokens, kept in the store so every controller of a cluster accepts them. Only
// one live (not revoked) token has a name; a revoked token keeps its row, as history, and lets
// its name be reused. workspaces is a JSON array of workspace ids ([] for all).
func init() {
	addMigration(11, "api tokens",
		`CREATE TABLE tokens (
			name TEXT NOT NULL, hash TEXT NOT NULL UNIQUE, workspaces TEXT NOT NULL DEFAULT '[]',
			created_at {ts} NOT NULL, expires_at {ts} NULL, revoked_at {ts} NULL)`,
		`CREATE UNIQUE INDEX `+liveTokenIndex+` ON tokens(name) WHERE revoked_at IS NULL`,
	)
}

// liveTokenIndex is the unique index that keeps one live token per name.
const liveTokenIndex = "tokens_live_name"

const tokenCols = `name, hash, workspaces, created_at, expires_at, revoked_at`

func tokenExists(name string) error {
	return protocol.Errorf(protocol.CodeExists, "a token named %q already exists", name)
}

// zeroNull is t for a nullable column: NULL when zero.
func zeroNull(t time.Time) sql.NullTime {
	if t.IsZero() {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: t.UTC(), Valid: true}
}

// zeroTime is a nullable column's time: zero when NULL, in UTC otherwise.
func zeroTime(t sql.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

func scanToken(row interface{ Scan(...any) error }) (store.Token, error) {
	var t store.Token
	var workspaces string
	var expires, revoked sql.NullTime
	if err := row.Scan(&t.Name, &t.Hash, &workspaces, &t.CreatedAt, &expires, &revoked); err != nil {
		return t, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = t.CreatedAt.UTC(), zeroTime(expires), zeroTime(revoked)
	if err := json.Unmarshal([]byte(workspaces), &t.Workspaces); err != nil {
		return t, fmt.Errorf("token %q workspaces: %w", t.Name, err)
	}
	return t, nil
}

// CreateToken records t. The name check inside the transaction holds on SQLite, whose writers
// are serialized; on PostgreSQL a concurrent create can pass it, and the live-name index
// refuses the second insert.
func (s *DB) CreateToken(ctx context.Context, t store.Token) error {
	workspaces, err := jsonList(t.Workspaces)
	if err != nil {
		return fmt.Errorf("token %q workspaces: %w", t.Name, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT COUNT(*) FROM tokens WHERE name = ? AND revoked_at IS NULL`), t.Name).Scan(&n); err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	if n > 0 {
		return tokenExists(t.Name)
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO tokens (`+tokenCols+`) VALUES (?, ?, ?, ?, ?, ?)`),
		t.Name, t.Hash, workspaces, t.CreatedAt.UTC(), zeroNull(t.ExpiresAt), zeroNull(t.RevokedAt)); err != nil {
		if s.d.uniqueConstraint(err) == liveTokenIndex {
			return tokenExists(t.Name)
		}
		return fmt.Errorf("insert token: %w", err)
	}
	return tx.Commit()
}

// TokenByHash finds the token whose secret hashes to hash, whatever its state: whether a revoked
// or expired token is refused is the caller's decision (and its error message).
func (s *DB) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := scanToken(s.queryRow(ctx, s.d.q(`SELECT `+tokenCols+` FROM tokens WHERE hash = ?`), hash))
	if errors.Is(err, sql.ErrNoRows) {
		// Never echo the hash: it is as good as a secret's fingerprint in a log.
		return t, protocol.Errorf(protocol.CodeNotFound, "no token has that hash")
	}
	return t, err
}

func (s *DB) ListTokens(ctx context.Context) ([]store.Token, error) {
	return queryAll(ctx, s, scanToken, `SELECT `+tokenCols+` FROM tokens ORDER BY created_at, name, hash`)
}

// RevokeToken revokes the live token of that name; already revoked ones keep their time.
func (s *DB) RevokeToken(ctx context.Context, name string, at time.Time) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL`), at.UTC(), name)
	return affected(res, err, "token", name)
}
