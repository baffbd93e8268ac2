package savedcopy

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Archives reads receipts' stored archives: the blob store that holds them, and the identity
// that decrypts the encrypted ones.
type Archives struct {
	Blobs    blob.Store
	Identity *age.X25519Identity
	// Pin, when set, is called before a receipt's objects are opened: it keeps gc off them until
	// release, and fails when the receipt is no longer there to read (removed or reclaimed
	// since the caller loaded it).
	Pin func(ctx context.Context, snap api.Snapshot) (release func(), err error)
	// Go starts a named routine of the owner's group: composing an incremental receipt's
	// layers runs in one (compose.go).
	Go func(name string, fn func(context.Context)) bool
}

// Open streams a snapshot's plain (decrypted) archive. The stored object's size and
// SHA-256 are checked against the receipt as it flows; a mismatch surfaces as a read error at
// the end, before the reader ever reports EOF, so nobody downstream publishes a bad archive.
func (a Archives) Open(ctx context.Context, snap api.Snapshot) (io.Reader, func(), error) {
	if snap.ReclaimedAt != nil {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound, "snapshot %s was reclaimed by gc at %s: a newer receipt of workspace %s holds its work",
			snap.ID, snap.ReclaimedAt.UTC().Format(time.RFC3339), snap.WorkspaceID)
	}
	release := func() {}
	if a.Pin != nil {
		var err error
		if release, err = a.Pin(ctx, snap); err != nil {
			return nil, nil, err
		}
	}
	if len(snap.Layers) > 0 {
		r, closeComposed, err := a.openComposed(ctx, snap)
		if err != nil {
			release()
			return nil, nil, err
		}
		return r, func() { closeComposed(); release() }, nil
	}
	rc, _, err := a.Blobs.Get(ctx, snap.ObjectKey)
	if err != nil {
		release()
		return nil, nil, err
	}
	closeAll := func() { rc.Close(); release() }
	verified := &receiptReader{r: rc, snap: snap, sum: sha256.New()}
	if !snap.Encrypted {
		return verified, closeAll, nil
	}
	plain, err := age.Decrypt(verified, a.Identity)
	if err != nil {
		closeAll()
		return nil, nil, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: decrypt: %v", snap.ID, err)
	}
	// age stops at its final chunk; read the object to its end so the check above runs.
	return &thenDrain{r: plain, tail: verified}, closeAll, nil
}

// receiptReader checks the bytes of a stored object against its receipt.
type receiptReader struct {
	r    io.Reader
	snap api.Snapshot
	n    int64
	sum  hash.Hash
}

func (v *receiptReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.n += int64(n)
	v.sum.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(v.sum.Sum(nil)); v.n != v.snap.Bytes || got != v.snap.SHA256 {
			return n, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: stored object is %d bytes with sha256 %s, the receipt says %d bytes with sha256 %s",
				v.snap.ID, v.n, got, v.snap.Bytes, v.snap.SHA256)
		}
	}
	return n, err
}

// thenDrain reads r, and at its end reads tail to its end too, reporting tail's error if any.
type thenDrain struct {
	r, tail io.Reader
}

func (t *thenDrain) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if errors.Is(err, io.EOF) {
		if _, derr := io.Copy(io.Discard, t.tail); derr != nil {
			return n, derr
		}
	}
	return n, err
}

// Verify reads a receipt's stored object to its end and checks it, in memory independent
// of its entries: its size and SHA-256 against the receipt, the archive as snapshot.Verify
// does, and the manifest against the one the receipt recorded at capture. onEntry, when set,
// sees every entry as it is verified.
func (a Archives) Verify(ctx context.Context, snap *api.Snapshot, onEntry func(snapshot.Entry) error) (*snapshot.Verified, error) {
	archive, closeArchive, err := a.Open(ctx, *snap)
	if err != nil {
		return nil, err
	}
	defer closeArchive()
	raw := &readErr{r: archive}
	v, err := snapshot.Verify(ctx, raw, snapshot.VerifyOptions{MaxEntries: snap.Summary.Entries, MaxBytes: snap.Summary.Bytes, OnEntry: onEntry})
	if err == nil {
		// Verify may stop at the archive's end; the rest must still match the receipt.
		_, err = io.Copy(io.Discard, raw)
	}
	if err != nil {
		return nil, archiveErr(ctx, snap, raw, err)
	}
	sum := snap.Summary
	if v.Totals.Entries != sum.Entries || v.Totals.Bytes != sum.Bytes ||
		len(snap.Layers) == 0 && sum.Manifest != "" && v.ManifestSHA256 != sum.Manifest || sum.Tree != "" && v.TreeSHA256 != sum.Tree {
		return nil, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: the archive's manifest differs from the receipt", snap.ID)
	}
	return v, nil
}

// OpenEntry opens snap's archive once and reads it up to the entry e at position pos (since
// entries come in manifest order), and no further: the reader returned is at the entry's first
// byte. closeEntry releases the archive.
func (a Archives) OpenEntry(ctx context.Context, snap *api.Snapshot, e snapshot.Entry, pos int) (entry io.Reader, closeEntry func(), err error) {
	archive, closeArchive, err := a.Open(ctx, *snap)
	if err != nil {
		return nil, nil, err
	}
	raw := &readErr{r: archive}
	dec, err := zstd.NewReader(raw, zstd.WithDecoderMaxWindow(128<<20), zstd.WithDecoderMaxMemory(128<<20))
	if err != nil {
		closeArchive()
		return nil, nil, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: %v", snap.ID, err)
	}
	tr := tar.NewReader(dec)
	if err := seekEntry(tr, e, pos); err != nil {
		dec.Close()
		closeArchive()
		return nil, nil, archiveErr(ctx, snap, raw, err)
	}
	return tr, func() { dec.Close(); closeArchive() }, nil
}

// seekEntry reads tar headers up to the entry at position pos (global PAX headers aside) and
// checks that it is the regular file e; the reader is then at the entry's first byte.
func seekEntry(tr *tar.Reader, e snapshot.Entry, pos int) error {
	for i := 0; ; {
		h, err := tr.Next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if i < pos {
			i++
			continue
		}
		if h.Name != e.Path || h.Typeflag != tar.TypeReg || h.Size != e.Size {
			return fmt.Errorf("archive entry %d is %q (type %q, %d bytes), the manifest says the file %q of %d bytes", pos, h.Name, h.Typeflag, h.Size, e.Path, e.Size)
		}
		return nil
	}
}

// archiveErr types a failure to read a saved archive. The stored object's own failure comes
// first: a decoder reading ahead may report the damage it caused (a failed CRC) rather than the
// receipt check that failed under it. A failure of that stream (a cut connection) is passed on
// as it is; anything else wrong with the zstd or tar data is the archive's fault.
func archiveErr(ctx context.Context, snap *api.Snapshot, raw *readErr, err error) error {
	switch {
	case raw.err != nil:
		return raw.err
	case protocol.CodeOf(err) == protocol.CodeInternal && ctx.Err() == nil:
		return protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: %v", snap.ID, err)
	}
	return err
}

// readErr remembers the error of the stored object's stream, telling a failed read apart from a
// malformed archive.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}
