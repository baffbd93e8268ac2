package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// marker is allocation.json: the provider's proof that it made a directory,
// and what it needs to restart the runner there. It holds no token.
type marker struct {
	Allocation    string `json:"allocation"`
	Workspace     string `json:"workspace"`
	ControllerURL string `json:"controller_url"`
	// Runner is the host path of the runner binary Start runs (InstallRunner changes it).
	Runner  string            `json:"runner"`
	Env     map[string]string `json:"env,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	// Isolation is how the runner confines the agent (namespaces, or none when asked); AgentID
	// the agent's host uid and gid when the provider is root, -1 otherwise.
	Isolation string `json:"isolation"`
	AgentID   int    `json:"agent_id"`
}

// writeMarker writes dir's marker atomically.
func writeMarker(dir string, m marker) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, markerFileName)
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := openNoFollow(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func readMarker(dir string) (marker, error) {
	var m marker
	f, err := openNoFollow(filepath.Join(dir, markerFileName), os.O_RDONLY, 0)
	if err != nil {
		return m, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return m, err
	}
	m.AgentID = -1 // a marker from before isolation has none, and no agent uid
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", markerFileName, err)
	}
	if m.Isolation == "" {
		m.Isolation = isolationNone
	}
	return m, nil
}

// owned returns the directory and marker of an allocation this provider
// made. A missing directory is CodeNotFound; a symlink is refused; a
// directory without our marker (or with another allocation's) is
// CodeForeign: we never act on what we did not create.
func (p *Provider) owned(id string) (string, marker, error) {
	dir, err := p.allocationDir(id)
	if err != nil {
		return "", marker{}, err
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", marker{}, provider.Errorf(provider.CodeNotFound, "allocation %s does not exist", id)
	}
	if err != nil {
		return "", marker{}, provider.Errorf(provider.CodeProviderFailed, "allocation %s: %v", id, err)
	}
	if err := checkPrivate(dir, fi); err != nil {
		return "", marker{}, err
	}
	m, err := readMarker(dir)
	if err != nil || m.Allocation != id {
		return "", marker{}, provider.Errorf(provider.CodeForeign,
			"%s was not made by the local provider for allocation %s; refusing to touch it", dir, id)
	}
	return dir, m, nil
}
