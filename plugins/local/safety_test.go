package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/plugins/provider"
)

func TestConfigureCreatesPrivateStateDir(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "a", "b")
	if err := New("x").Configure(context.Background(), provider.Config{StateDir: stateDir}); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, stateDir); !m.IsDir() || m.Perm() != 0o700 {
		t.Fatalf("state dir mode = %v", m)
	}
}

func TestConfigureRefusesUnsafeStateDir(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()

	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	err := New("x").Configure(ctx, provider.Config{StateDir: link})
	wantCode(t, err, provider.CodeSymlinkRefused)

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o750); err != nil {
		t.Fatal(err)
	}
	err = New("x").Configure(ctx, provider.Config{StateDir: open})
	wantCode(t, err, provider.CodeFailedPrecondition)

	err = New("x").Configure(ctx, provider.Config{StateDir: "relative/dir"})
	wantCode(t, err, provider.CodeInvalidArgument)

	err = New("x").Configure(ctx, provider.Config{StateDir: real, Options: map[string]string{"bogus": "1"}})
	wantCode(t, err, provider.CodeInvalidArgument)
}

func TestConfigureRefusesUnsafeAllocationDirs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, stateDir string)
		code  string
	}{
		{"symlink", func(t *testing.T, stateDir string) {
			if err := os.Symlink(t.TempDir(), filepath.Join(stateDir, "a1")); err != nil {
				t.Fatal(err)
			}
		}, provider.CodeSymlinkRefused},
		{"group readable", func(t *testing.T, stateDir string) {
			d := filepath.Join(stateDir, "a1")
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o750); err != nil {
				t.Fatal(err)
			}
		}, provider.CodeFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stateDir := newConfigured(t)
			tc.plant(t, stateDir)
			err := New("x").Configure(ctx, provider.Config{StateDir: stateDir})
			wantCode(t, err, tc.code)
		})
	}
}

func TestCreateRefusesPlantedSymlink(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfigured(t)
	target := t.TempDir()
	if err := os.Symlink(target, filepath.Join(stateDir, "a1")); err != nil {
		t.Fatal(err)
	}
	runner := writeScript(t, "exec sleep 300\n")
	_, err := p.Create(ctx, createReq("a1", runner, nil))
	wantCode(t, err, provider.CodeSymlinkRefused)
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Fatalf("Create wrote through the symlink: %d entries", len(entries))
	}
	// Stop and Destroy must not act through it either.
	wantCode(t, p.Stop(ctx, "a1"), provider.CodeSymlinkRefused)
	wantCode(t, p.Destroy(ctx, "a1"), provider.CodeSymlinkRefused)
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("symlink target was removed: %v", err)
	}
}

func TestCreateRefusesLoosenedStateDir(t *testing.T) {
	p, stateDir := newConfigured(t)
	if err := os.Chmod(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	runner := writeScript(t, "exec sleep 300\n")
	_, err := p.Create(context.Background(), createReq("a1", runner, nil))
	wantCode(t, err, provider.CodeFailedPrecondition)
}

func TestParseProcStat(t *testing.T) {
	// A command name may contain spaces and parentheses.
	line := "4242 (we ir) (d) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 100\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.pid != 4242 || st.state != 'S' || st.session != 4242 || st.start != 987654 {
		t.Fatalf("parsed %+v", st)
	}
	if _, err := parseProcStat([]byte("12 (x) S 1 2")); err == nil {
		t.Fatal("short line accepted")
	}
}

func TestConfigureRefusesForeignOwner(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to give the directory to another user")
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := New("x").Configure(context.Background(), provider.Config{StateDir: dir})
	wantCode(t, err, provider.CodeFailedPrecondition)
}
