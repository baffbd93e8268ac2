// Package snapshottest writes snapshot archives for tests of the readers: large ones, streamed
// without a tree on disk and without holding their entries.
package snapshottest

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// MTime is every synthetic entry's mtime.
var MTime = time.Unix(1700000000, 0).UTC()

// Tree is a synthetic tree: Dirs directories "d0000"… at the root, each holding Files files
// "f0000"…; one file in a thousand holds its own path as content, the others are empty.
type Tree struct{ Dirs, Files int }

// Entries is how many entries the tree has.
func (t Tree) Entries() int { return t.Dirs * (t.Files + 1) }

// Each calls fn with every entry in Capture's order, and the content of each file.
func (t Tree) Each(fn func(e snapshot.Entry, body []byte) error) error {
	empty := sha256.Sum256(nil)
	for d := range t.Dirs {
		dir := snapshot.Entry{Path: fmt.Sprintf("d%04d", d), Type: snapshot.TypeDir, Mode: 0o755, MTime: MTime}
		if err := fn(dir, nil); err != nil {
			return err
		}
		for f := range t.Files {
			e := snapshot.Entry{Path: fmt.Sprintf("%s/f%04d", dir.Path, f), Type: snapshot.TypeFile, Mode: 0o644, MTime: MTime, SHA256: hex.EncodeToString(empty[:])}
			var body []byte
			if f%1000 == 0 {
				body = []byte(e.Path)
				sum := sha256.Sum256(body)
				e.Size, e.SHA256 = int64(len(body)), hex.EncodeToString(sum[:])
			}
			if err := fn(e, body); err != nil {
				return err
			}
		}
	}
	return nil
}

// Write streams the tree's archive, zstd-compressed as Capture's, to w. The manifest is written
// an entry at a time, its size computed by a first pass; sample, when set, is called every
// 10,000 manifest entries.
func (t Tree) Write(w io.Writer, sample func()) error {
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(512<<10))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(enc)
	tot := snapshot.Totals{}
	err = t.Each(func(e snapshot.Entry, body []byte) error {
		tot.Entries++
		h := &tar.Header{Name: e.Path, Typeflag: tar.TypeReg, Mode: int64(e.Mode), Size: e.Size, ModTime: e.MTime, Format: tar.FormatPAX}
		if e.Type == snapshot.TypeDir {
			h.Name, h.Typeflag = e.Path+"/", tar.TypeDir
			tot.Dirs++
		} else {
			tot.Files++
			tot.Bytes += e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	})
	if err != nil {
		return err
	}
	m := &snapshot.Manifest{Version: snapshot.FormatVersion, WorkspaceID: "w", CreatedAt: MTime, Entries: []snapshot.Entry{}, Skipped: []snapshot.Skipped{}, Totals: tot}
	whole, err := json.Marshal(m)
	if err != nil {
		return err
	}
	head, tail, _ := strings.Cut(string(whole), `"entries":[]`)
	head += `"entries":[`
	tail = "]" + tail
	size, n := int64(len(head)+len(tail)), 0
	err = t.Each(func(e snapshot.Entry, _ []byte) error {
		js, err := json.Marshal(e)
		size += int64(len(js))
		if n++; n > 1 {
			size++
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: snapshot.ManifestName, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: MTime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	bw := bufio.NewWriter(tw)
	bw.WriteString(head)
	n = 0
	err = t.Each(func(e snapshot.Entry, _ []byte) error {
		if n++; n > 1 {
			bw.WriteByte(',')
		}
		if n%10_000 == 0 && sample != nil {
			sample()
		}
		js, err := json.Marshal(e)
		bw.Write(js)
		return err
	})
	if err != nil {
		return err
	}
	bw.WriteString(tail)
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return enc.Close()
}
