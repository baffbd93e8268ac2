package sqlstore

import (
	"context"
	"errors"
	"time"

	"github.com/tetherhq/tether/controller/store"
)

// errNotYet stands for the cluster roles until they are implemented.
var errNotYet = errors.New("sqlstore: not implemented yet")

func (s *DB) ClaimAllocation(ctx context.Context, id, controller, root, runnerVersion string) error {
	return errNotYet
}
func (s *DB) ReleaseAllocation(ctx context.Context, id, controller string) (bool, error) {
	return false, errNotYet
}
func (s *DB) DisownAllocations(ctx context.Context, controller string) ([]string, error) {
	return nil, errNotYet
}
func (s *DB) OverdueAllocations(ctx context.Context, now time.Time) ([]store.Allocation, error) {
	return nil, errNotYet
}
func (s *DB) Heartbeat(ctx context.Context, m store.Member) (time.Time, error) {
	return time.Time{}, errNotYet
}
func (s *DB) GetMember(ctx context.Context, id string) (store.Member, error) {
	return store.Member{}, errNotYet
}
func (s *DB) ListMembers(ctx context.Context) ([]store.Member, error) { return nil, errNotYet }
func (s *DB) RemoveMember(ctx context.Context, id string) error       { return errNotYet }
func (s *DB) ClusterSecret(ctx context.Context) (string, error)       { return "", errNotYet }
func (s *DB) TryClusterLock(ctx context.Context, name string) (func(), bool, error) {
	return nil, false, errNotYet
}
func (s *DB) TouchUpload(ctx context.Context, key, controller string) error { return errNotYet }
func (s *DB) DoneUpload(ctx context.Context, key string) error              { return errNotYet }
func (s *DB) LiveUploads(ctx context.Context, since time.Time) (map[string]bool, error) {
	return nil, errNotYet
}
func (s *DB) WatchAllocations(ctx context.Context) (<-chan string, error) { return nil, errNotYet }
