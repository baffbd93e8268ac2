package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

func init() {
	addMigration(10, "allocation info",
		`CREATE TABLE allocation_info (
			allocation_id TEXT PRIMARY KEY REFERENCES allocations(id), info TEXT NOT NULL)`,
	)
}

func (s *DB) SetAllocationInfo(ctx context.Context, id string, info map[string]string) error {
	if info == nil {
		info = map[string]string{}
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if _, err := s.GetAllocation(ctx, id); err != nil {
		return err
	}
	_, err = s.exec(ctx, s.d.q(`INSERT INTO allocation_info (allocation_id, info) VALUES (?, ?)
		ON CONFLICT (allocation_id) DO UPDATE SET info = excluded.info`), id, string(b))
	return err
}

func (s *DB) AllocationInfo(ctx context.Context, id string) (map[string]string, error) {
	var raw string
	err := s.queryRow(ctx, s.d.q(`SELECT info FROM allocation_info WHERE allocation_id = ?`), id).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	info := map[string]string{}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return nil, fmt.Errorf("allocation %s info: %w", id, err)
	}
	return info, nil
}
