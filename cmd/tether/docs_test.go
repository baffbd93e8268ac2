package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The CLI reference is generated from the commands: a flag, command or exit status changed
// without `go generate ./cmd/tether` fails here.
func TestCLIReferenceIsGenerated(t *testing.T) {
	root := newRootCmd(&cli{})
	repo := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := generateReadme(root, string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(readme) {
		t.Errorf("README.md's generated sections differ from the commands; run: go generate ./cmd/tether\n%s", firstDiff(string(readme), want))
	}
	doc, err := os.ReadFile(filepath.Join(repo, cliDocPath))
	if err != nil {
		t.Fatal(err)
	}
	if got := cliReference(root); got != string(doc) {
		t.Errorf("%s differs from the commands; run: go generate ./cmd/tether\n%s", cliDocPath, firstDiff(string(doc), got))
	}
	// What the reference must hold, so a generator gone blank cannot pass.
	for _, s := range []string{"## tether workspace create", "`--source string`", "## tether context set", "## tether version"} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("%s lacks %q", cliDocPath, s)
		}
	}
	if !strings.Contains(string(readme), "| `canceled` | 130 |") {
		t.Error("README.md's exit statuses lack canceled (130)")
	}
}

func TestReplaceBetweenNeedsItsMarkers(t *testing.T) {
	if _, err := generateReadme(newRootCmd(&cli{}), "# no markers\n"); err == nil {
		t.Fatal("a README without markers was accepted")
	}
}

// firstDiff shows the first line where committed and generated text part.
func firstDiff(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(h), len(w)); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf("line %d:\n  committed: %s\n  generated: %s", i+1, hl, wl)
		}
	}
	return ""
}
