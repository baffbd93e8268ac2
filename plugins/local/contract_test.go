package local_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/plugins/providertest"
)

// The local provider passes the provider contract through its real plugin
// binary, loaded with go-plugin as the controller loads it.
func TestProviderContract(t *testing.T) {
	bin := providertest.Build(t, "github.com/tetherhq/tether/cmd/tether-provider-local", "tether-provider-local", "")
	stateDir := filepath.Join(t.TempDir(), "providers", "local")
	providertest.Run(t, func(t *testing.T) provider.Provider {
		return providertest.OpenPlugin(t, bin)
	}, providertest.Env{
		// The contract's fake runner confines nothing; isolation has its own tests.
		Config: provider.Config{StateDir: stateDir, Options: map[string]string{"isolation": "none"}},
		BadConfigs: []provider.Config{
			{StateDir: "relative/dir"},
			{StateDir: ""},
		},
		// A directory the provider did not make: no allocation.json.
		MakeForeign: func(t *testing.T, id string) {
			dir := filepath.Join(stateDir, id)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("not tether's"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		ForeignExists: func(t *testing.T, id string) bool {
			_, err := os.Stat(filepath.Join(stateDir, id, "keep"))
			return err == nil
		},
		Check: func(t *testing.T, alloc provider.Allocation, h providertest.Hello) {
			if want := filepath.Join(stateDir, alloc.ID, "root"); alloc.Root != want {
				t.Errorf("root = %s, want %s", alloc.Root, want)
			}
			if h.UID != os.Getuid() {
				t.Errorf("runner uid %d, want the controller's %d", h.UID, os.Getuid())
			}
		},
	})
}
