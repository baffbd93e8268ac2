package snapshot

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

// agentReserved are files and directories an agent may name like Tether's own.
var agentReserved = []string{
	".tether-tmp-agent", "sub/" + ManifestName, "sub/.tether-tmp-x/inner", ".tether-stage-mine/f", "deep/er/.tether-stage-",
}

func plantReserved(t *testing.T, dir string) {
	t.Helper()
	for _, p := range agentReserved {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		writeFile(t, filepath.Join(dir, p), "agent work in "+p, 0o644)
	}
}

// A name that only looks like Tether's is the agent's file: archived, counted, restored as it was.
func TestReservedLookingNamesRoundTrip(t *testing.T) {
	src := sampleTree(t)
	plantReserved(t, src)
	want := describe(t, src, true, nil)
	data, m := capture(t, src)
	archived := map[string]bool{}
	for _, e := range m.Entries {
		archived[e.Path] = true
	}
	held := 0
	for _, p := range agentReserved {
		if archived[p] {
			held++
		} else {
			t.Errorf("%s was not archived", p)
		}
	}
	if len(m.Skipped) != 0 {
		t.Errorf("skipped %+v", m.Skipped)
	}
	dst := t.TempDir()
	if _, err := restoreInto(t, data, dst, "."); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if d := diffMaps(want, describe(t, dst, true, nil)); d != "" {
		t.Fatalf("restored tree differs:\n%s", d)
	}
	if _, err := ReadManifest(context.Background(), bytes.NewReader(data)); err != nil {
		t.Fatalf("verify: %v", err)
	}
	t.Logf("reserved-looking names: %d planted, %d archived and restored", len(agentReserved), held)
}

// The manifest's own name at the root cannot be archived under it: the capture fails naming it.
func TestManifestNameAtTheRootFailsTheCapture(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, ManifestName), "{}", 0o644)
	_, err := Capture(context.Background(), openRoot(t, src), io.Discard, CaptureOptions{})
	wantCode(t, err, CodeReservedName)
	if !strings.Contains(err.Error(), ManifestName) {
		t.Fatalf("the error does not name the file: %v", err)
	}
}

// blockingReader hands out one byte, says so, and then blocks until released.
type blockingReader struct {
	reading chan struct{}
	release chan struct{}
	sent    bool
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		close(b.reading)
		p[0] = 'x'
		return 1, nil
	}
	<-b.release
	return 0, io.EOF
}

// The runner's own temporary file and staging directory, while a write and a restore are in
// flight, are left out (and listed as skipped); an agent's file of the same shape beside them is
// archived.
func TestInFlightRunnerTempsAreNotArchived(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".tether-tmp-agent"), "mine", 0o644)
	holds := fsguard.NewHolds()
	root, err := fsguard.Open(dir, fsguard.WithHolds(holds))
	must(t, err)
	defer root.Close()

	write := &blockingReader{reading: make(chan struct{}), release: make(chan struct{})}
	wrote := make(chan error, 1)
	go func() {
		_, err := root.WriteFile(context.Background(), "written", write, 0o644, fsguard.WriteOptions{})
		wrote <- err
	}()
	restore := &blockingReader{reading: make(chan struct{}), release: make(chan struct{})}
	restored := make(chan error, 1)
	go func() {
		_, err := Restore(context.Background(), root, restore, RestoreOptions{Dir: "restored"})
		restored <- err
	}()
	<-write.reading
	<-restore.reading

	m, err := Capture(context.Background(), root, io.Discard, CaptureOptions{})
	must(t, err)
	var skipped, archived []string
	for _, s := range m.Skipped {
		if s.Reason != inFlight {
			t.Errorf("skipped %s: %s", s.Path, s.Reason)
		}
		skipped = append(skipped, s.Path)
	}
	for _, e := range m.Entries {
		archived = append(archived, e.Path)
	}
	if len(skipped) != 2 || !strings.HasPrefix(skipped[0], fsguard.TempPrefix) && !strings.HasPrefix(skipped[1], fsguard.TempPrefix) {
		t.Errorf("skipped %v, want the write's temporary file and the restore's staging directory", skipped)
	}
	if strings.Join(archived, " ") != ".tether-tmp-agent" {
		t.Errorf("archived %v, want the agent's file alone", archived)
	}

	close(write.release)
	close(restore.release)
	must(t, <-wrote)
	if err := <-restored; err == nil {
		t.Fatal("a restore of one byte of junk succeeded")
	}
	// Once done, nothing is held: a capture leaves nothing out.
	m, err = Capture(context.Background(), root, io.Discard, CaptureOptions{})
	must(t, err)
	if len(m.Skipped) != 0 || len(m.Entries) != 2 {
		t.Fatalf("after the write: entries %+v, skipped %+v", m.Entries, m.Skipped)
	}
	t.Logf("in flight: %d runner temporaries left out, %d agent file of the same shape archived", len(skipped), len(archived))
}

// archivedAt lists where a restore at dir put each entry of m (none when m is nil).
func archivedAt(m *Manifest, dir string) map[string]bool {
	out := map[string]bool{}
	if m != nil {
		for _, e := range m.Entries {
			out[filepath.Join(dir, e.Path)] = true
		}
	}
	return out
}

// noLeftoversBut is noLeftovers for a tree that may hold reserved-looking names an archive
// brought back (archived): those are files, not leftovers.
func noLeftoversBut(t testing.TB, dir string, archived map[string]bool) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && reserved(d.Name()) && d.Name() != ManifestName && !archived[p] {
			t.Errorf("leftover %s", p)
		}
		return nil
	})
}
