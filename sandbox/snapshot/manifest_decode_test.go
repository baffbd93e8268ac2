package snapshot

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// decodeManifest, which streams the entries, decodes every manifest exactly as json.Unmarshal
// does, and refuses what Unmarshal refuses.
func TestDecodeManifestMatchesUnmarshal(t *testing.T) {
	full := Manifest{Version: FormatVersion, WorkspaceID: "ws_1", Epoch: 3, Parent: "snap_0", ToolVersion: "t",
		CreatedAt: time.Date(2026, 12, 3, 1, 2, 3, 4, time.UTC),
		Entries: []Entry{{Path: "a", Type: TypeDir, Mode: 0o755}, {Path: "a/b", Type: TypeFile, Mode: 0o644, Size: 3,
			SHA256: strings.Repeat("ab", 32)}, {Path: "l", Type: TypeSymlink, LinkTarget: "a/b"}},
		Skipped: []Skipped{{Path: "p", Reason: "special file"}}, Totals: Totals{Files: 1, Dirs: 1, Symlinks: 1, Bytes: 3}, GitError: "x"}
	js, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	good := []string{
		string(js),
		" \n" + string(js) + " \n\t",
		`{"version":1,"entries":null}`,
		`{"version":1}`,
		`{"entries":[{"path":"x"}],"version":1,"entries":[{"path":"y"},{"path":"z"}]}`, // the later wins
		`{"Entries":[{"path":"x"}],"VERSION":1,"unknown":{"deep":[1,2,3]}}`,            // keys match without case
		`{"entri\u0065s":[{"path":"x"}],"version":1}`,
		`{"version":1,"entries":[null,{"path":"x"}]}`,
	}
	for _, in := range good {
		var want Manifest
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("Unmarshal(%.60q): %v", in, err)
		}
		got, err := decodeManifest(strings.NewReader(in))
		if err != nil {
			t.Fatalf("decodeManifest(%.60q): %v", in, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("decodeManifest(%.60q) = %+v\nUnmarshal gives %+v", in, *got, want)
		}
	}
	bad := []string{
		``, `[]`, `{`, `{"version":1`, `{"version":1}}`, `{"version":1} x`, `{"version":1}{}`,
		`{"entries":{}}`, `{"entries":[1]}`, `{"entries":[{"path":"x"}`, `{"version":"one"}`,
		`{"entries":[{"path":"x"},]}`, string(js) + ",",
	}
	for _, in := range bad {
		var m Manifest
		uerr := json.Unmarshal([]byte(in), &m)
		if _, err := decodeManifest(strings.NewReader(in)); err == nil || uerr == nil {
			t.Errorf("%.60q: decodeManifest error %v, Unmarshal error %v; want both to refuse it", in, err, uerr)
		}
	}
	// Unmarshal takes null as a zero manifest, which the version check then refuses; the
	// stream refuses it at once.
	if _, err := decodeManifest(strings.NewReader("null")); err == nil {
		t.Error("decodeManifest took null for a manifest")
	}
}
