package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/store"
)

// Version 13: the controllers sharing the store, as each last registered itself, and the
// cluster's own settings (k → v; so far the secret controllers authenticate each other with).
func init() {
	addMigration(13, "cluster members and secret",
		`CREATE TABLE members (
			id TEXT PRIMARY KEY, address TEXT NOT NULL, version TEXT NOT NULL DEFAULT '',
			started_at {ts} NOT NULL, heartbeat_at {ts} NOT NULL)`,
		`CREATE TABLE cluster (k TEXT PRIMARY KEY, v TEXT NOT NULL)`,
	)
}

// clusterSecretKey is the cluster row holding the secret.
const clusterSecretKey = "secret"

const memberCols = `id, address, version, started_at, heartbeat_at`

func scanMember(row interface{ Scan(...any) error }) (store.Member, error) {
	var m store.Member
	err := row.Scan(&m.ID, &m.Address, &m.Version, &m.StartedAt, &m.HeartbeatAt)
	m.StartedAt, m.HeartbeatAt = m.StartedAt.UTC(), m.HeartbeatAt.UTC()
	return m, err
}

// Heartbeat inserts or updates m in one statement, so a member's first heartbeat and its
// re-registration after a restart are the same call.
func (s *DB) Heartbeat(ctx context.Context, m store.Member) (time.Time, error) {
	now := s.now()
	if _, err := s.exec(ctx, s.d.q(`INSERT INTO members (`+memberCols+`) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET address = excluded.address, version = excluded.version,
			started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`),
		m.ID, m.Address, m.Version, m.StartedAt.UTC(), now); err != nil {
		return time.Time{}, fmt.Errorf("heartbeat of %s: %w", m.ID, err)
	}
	return now, nil
}

func (s *DB) GetMember(ctx context.Context, id string) (store.Member, error) {
	m, err := scanMember(s.queryRow(ctx, s.d.q(`SELECT `+memberCols+` FROM members WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return m, notFound("member", id)
	}
	return m, err
}

func (s *DB) ListMembers(ctx context.Context) ([]store.Member, error) {
	return queryAll(ctx, s, scanMember, `SELECT `+memberCols+` FROM members ORDER BY id`)
}

func (s *DB) RemoveMember(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, s.d.q(`DELETE FROM members WHERE id = ?`), id); err != nil {
		return fmt.Errorf("remove member %s: %w", id, err)
	}
	return nil
}

// ClusterSecret returns the stored secret, making one if there is none. Of controllers making
// one at once, the first insert wins and the others' are ignored (ON CONFLICT DO NOTHING), so
// everyone reads the winner's.
func (s *DB) ClusterSecret(ctx context.Context) (string, error) {
	secret, err := s.clusterSecret(ctx)
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return secret, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("cluster secret: %w", err)
	}
	if _, err := s.exec(ctx, s.d.q(`INSERT INTO cluster (k, v) VALUES (?, ?) ON CONFLICT (k) DO NOTHING`),
		clusterSecretKey, hex.EncodeToString(b)); err != nil {
		return "", fmt.Errorf("cluster secret: %w", err)
	}
	return s.clusterSecret(ctx)
}

func (s *DB) clusterSecret(ctx context.Context) (string, error) {
	var v string
	err := s.queryRow(ctx, s.d.q(`SELECT v FROM cluster WHERE k = ?`), clusterSecretKey).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("cluster secret: %w", err)
	}
	return v, err
}
