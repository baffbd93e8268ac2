package snapshot

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
)

// entriesKey is where encodeManifest splices the entries into the rest of the manifest. A
// JSON string escapes every quote, so the first occurrence of these bytes is the key itself.
var entriesKey = []byte(`"entries":null`)

// encodeManifest writes exactly the bytes of json.Marshal(m) to w without ever holding them
// whole: the entries, which are nearly all of a manifest, are marshalled one at a time and
// the rest around them once. A capture of 20,000 files held a 14 MiB marshalled manifest at
// its memory peak; this holds one entry. tree, when set, receives every entry as
// json.Marshal(m.Entries) would with every Ref cleared, for the summary's tree digest.
func encodeManifest(w io.Writer, m *Manifest, tree *entryDigest) error {
	rest := *m
	rest.Entries = nil
	js, err := json.Marshal(&rest)
	if err != nil {
		return err
	}
	at := bytes.Index(js, entriesKey)
	if at < 0 {
		return fmt.Errorf("encode manifest: no entries key")
	}
	if _, err := w.Write(js[:at+len(`"entries":`)]); err != nil {
		return err
	}
	if m.Entries == nil {
		if _, err := io.WriteString(w, "null"); err != nil {
			return err
		}
	} else {
		if _, err := io.WriteString(w, "["); err != nil {
			return err
		}
		for i := range m.Entries {
			e, err := json.Marshal(&m.Entries[i])
			if err != nil {
				return fmt.Errorf("encode entry %s: %w", m.Entries[i].Path, err)
			}
			if i > 0 {
				if _, err := io.WriteString(w, ","); err != nil {
					return err
				}
			}
			if _, err := w.Write(e); err != nil {
				return err
			}
			if tree != nil {
				if m.Entries[i].Ref {
					// The tree digest is the tree's whichever receipt holds the bytes (TreeDigest).
					plain := m.Entries[i]
					plain.Ref = false
					if e, err = json.Marshal(&plain); err != nil {
						return err
					}
				}
				tree.write(e)
			}
		}
		if _, err := io.WriteString(w, "]"); err != nil {
			return err
		}
	}
	_, err = w.Write(js[at+len(entriesKey):])
	return err
}

// hashCounter counts and hashes what is written to it.
type hashCounter struct {
	n   int64
	sum hash.Hash
}

func (h *hashCounter) Write(p []byte) (int, error) {
	h.n += int64(len(p))
	return h.sum.Write(p)
}

// digests encodes m as a stream into a counter and two hashes: the SHA-256 and size of
// json.Marshal(m), and the SHA-256 of json.Marshal(m.Entries).
func digests(m *Manifest) (sum string, size int64, tree string, err error) {
	hc := &hashCounter{sum: sha256.New()}
	td := newEntryDigest()
	if err := encodeManifest(hc, m, td); err != nil {
		return "", 0, "", err
	}
	tree = td.sum()
	if m.Entries == nil {
		null := sha256.Sum256([]byte("null"))
		tree = hex.EncodeToString(null[:])
	}
	return hex.EncodeToString(hc.sum.Sum(nil)), hc.n, tree, nil
}

// writeManifest archives m as the last entry of tw. A tar header needs the size first, so
// the manifest is encoded twice as a stream — once to count and hash it (and the entries'
// tree digest), once into the archive — and never held whole. It sets m.SHA256, m.JSONSize
// and m.TreeSHA256.
func writeManifest(tw *tar.Writer, m *Manifest) error {
	sum, size, tree, err := digests(m)
	if err != nil {
		return err
	}
	m.SHA256, m.JSONSize, m.TreeSHA256 = sum, size, tree
	h := &tar.Header{Name: ManifestName, Typeflag: tar.TypeReg, Mode: 0o644, Size: size,
		ModTime: m.CreatedAt, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	// Counted and hashed again: the archived bytes must be the ones the summary names (an
	// encoding that differed between the passes would otherwise go unnoticed until a restore).
	again := &hashCounter{sum: sha256.New()}
	if err := encodeManifest(io.MultiWriter(tw, again), m, nil); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	if again.n != size || hex.EncodeToString(again.sum.Sum(nil)) != sum {
		return fmt.Errorf("write archive: the manifest encoded differently twice")
	}
	return nil
}

// ManifestDigests returns the SHA-256 of json.Marshal(m) and of json.Marshal(m.Entries), as
// a capture's summary names them, computed as streams (a capture has them already).
func ManifestDigests(m *Manifest) (manifest, tree string, err error) {
	if m.TreeSHA256 != "" && m.SHA256 != "" {
		return m.SHA256, m.TreeSHA256, nil
	}
	manifest, _, tree, err = digests(m)
	return manifest, tree, err
}
