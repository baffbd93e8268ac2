package daytona_test

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/plugins/daytona/fake"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/plugins/providertest"
)

// keyEnv holds the fake's API key. The tests never set DAYTONA_API_KEY, so
// the live suite stays off and the provider's own default is not exercised
// with a fake key.
const keyEnv = "TETHER_TEST_DAYTONA_KEY"

// newFake starts a FAKE Daytona API (plugins/daytona/fake) and puts its key
// in the environment the plugin inherits. Every request the provider sends
// and every answer the fake gives is checked against Daytona's published
// spec (spec_test.go); a violation fails the test.
func newFake(t *testing.T) *fake.Server {
	t.Helper()
	key := "fake-key-" + t.Name()
	t.Setenv(keyEnv, key)
	s := mustSpecs(t)
	return fake.New(t, t.TempDir(), key, fake.Observe(func(ex fake.Exchange) {
		if err := s.check(ex); err != nil {
			t.Errorf("Daytona spec violation: %v", err)
		}
	}))
}

// The Daytona provider passes the provider contract through its real
// plugin binary, against the fake Daytona API, whose sandboxes run the
// suite's runner as real local processes.
func TestProviderContract(t *testing.T) {
	f := newFake(t)
	bin := providertest.Build(t, "github.com/tetherhq/tether/cmd/tether-provider-daytona", "tether-provider-daytona", "")
	providertest.Run(t, func(t *testing.T) provider.Provider {
		return providertest.OpenPlugin(t, bin)
	}, providertest.Env{
		Config: provider.Config{StateDir: t.TempDir(), Options: map[string]string{
			"api_url": f.URL(), "api_key_env": keyEnv, "target": "eu", "auto_archive_interval": "60", "image": "ubuntu:24.04",
		}},
		BadConfigs: []provider.Config{
			{Options: map[string]string{"api_url": "ftp://example.invalid"}},
			{Options: map[string]string{"api_key_env": "lower-case"}},
			{Options: map[string]string{"auto_delete_interval": "-5"}},
			{Options: map[string]string{"cpus": "1.5"}},
			// Daytona takes resources only with an image.
			{Options: map[string]string{"cpus": "2"}},
			{Options: map[string]string{"snapshot": "s", "image": "i"}},
		},
		Resources: provider.Resources{CPUs: 1.5, MemoryMiB: 1536},
		// A sandbox under the allocation's name, made by someone else.
		MakeForeign: func(t *testing.T, id string) {
			f.Plant("tether-"+id, map[string]string{"owner": "someone-else", provider.LabelAllocation: id})
		},
		ForeignExists: func(t *testing.T, id string) bool {
			_, ok := f.Get("tether-" + id)
			return ok
		},
		Check: func(t *testing.T, alloc provider.Allocation, h providertest.Hello) {
			sb, ok := f.Get("tether-" + alloc.ID)
			if !ok {
				t.Fatal("no sandbox at the fake")
			}
			if sb.Labels["tether.allocation"] != alloc.ID || sb.Labels["tether.workspace"] != "ws-"+alloc.ID ||
				sb.Labels["tether.provider"] != "daytona" || sb.Labels["providertest"] != "yes" {
				t.Errorf("labels %v", sb.Labels)
			}
			if sb.CPU != 2 || sb.Memory != 2 || sb.Target != "eu" || sb.BuildInfo == nil || sb.BuildInfo.DockerfileContent != "FROM ubuntu:24.04\n" || sb.Snapshot != "" {
				t.Errorf("cpu %d, memory %d GiB, target %q, build %+v, snapshot %q; want 2, 2, eu, FROM ubuntu:24.04, none",
					sb.CPU, sb.Memory, sb.Target, sb.BuildInfo, sb.Snapshot)
			}
			if sb.AutoStopInterval != 0 || sb.AutoArchiveInterval != 60 || sb.AutoDeleteInterval != -1 {
				t.Errorf("intervals stop %d archive %d delete %d; want 0, 60, -1", sb.AutoStopInterval, sb.AutoArchiveInterval, sb.AutoDeleteInterval)
			}
			for k, v := range sb.Labels {
				if v == h.Token {
					t.Errorf("label %s holds the bootstrap token", k)
				}
			}
			for _, c := range f.Commands() {
				if strings.Contains(c, h.Token) {
					t.Errorf("a command Daytona logs holds the bootstrap token: %q", c)
				}
			}
		},
	})
}
