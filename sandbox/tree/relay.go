package tree

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/tarstream"
)

// RelayOptions bounds what Relay passes on.
type RelayOptions struct {
	// Top is the one name allowed at the archive's top level: every entry is Top or beneath it.
	Top string
	// MaxEntries and MaxBytes, when positive, cap the entries and the bytes of regular files.
	MaxEntries int
	MaxBytes   int64
}

// maxTrailing is what may follow a tar's end marker: GNU tar pads archives to 10 KiB records.
const maxTrailing = 10 << 10

// Relay reads a tar stream (plain or zstd) from an untrusted sender and writes it again to w as
// a plain PAX tar, entry by entry, passing on only what Extract would accept: canonical relative
// names beneath opts.Top (no absolute name, no "..", no empty component, no reserved staging or
// temporary name), directories, regular files and symlinks only, permission bits, modification
// times and link targets, nothing else of the sender's headers (no owners, no extended
// attributes). The end marker is written only once the sender's whole stream was read and
// checked, so a receiver of a cut or refused stream sees an archive without its end, which
// tarstream readers (and Extract) refuse.
func Relay(ctx context.Context, w io.Writer, r io.Reader, opts RelayOptions) (Stats, error) {
	if c, err := fsguard.Clean(opts.Top); err != nil || c != opts.Top || strings.Contains(opts.Top, "/") || c == "." {
		return Stats{}, invalid(opts.Top, "the archive's top-level name must be one path component")
	}
	src, err := tarstream.Decompress(r)
	if err != nil {
		return Stats{}, err
	}
	defer src.Close()
	tr := tarstream.NewReader(src)
	tw := tar.NewWriter(w)
	var stats Stats
	entries := 0
	for {
		if err := ctx.Err(); err != nil {
			return Stats{}, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Stats{}, err
		}
		entries++
		if opts.MaxEntries > 0 && entries > opts.MaxEntries {
			return Stats{}, invalid(h.Name, fmt.Sprintf("archive holds more than %d entries", opts.MaxEntries))
		}
		name, err := entryName(h, opts.Top)
		if err != nil {
			return Stats{}, fmt.Errorf("entry %q: %w", h.Name, err)
		}
		out := &tar.Header{Name: name, Mode: int64(entryMode(h)), ModTime: h.ModTime, Format: tar.FormatPAX}
		switch h.Typeflag {
		case tar.TypeDir:
			out.Typeflag, out.Name = tar.TypeDir, name+"/"
			stats.Dirs++
		case tar.TypeReg, typeRegOld:
			if opts.MaxBytes > 0 && stats.Bytes+h.Size > opts.MaxBytes {
				return Stats{}, invalid(name, fmt.Sprintf("archive holds more than %d bytes of files", opts.MaxBytes))
			}
			out.Typeflag, out.Size = tar.TypeReg, h.Size
			stats.Files++
			stats.Bytes += h.Size
		case tar.TypeSymlink:
			if err := checkLinkTarget(name, h.Linkname); err != nil {
				return Stats{}, err
			}
			out.Typeflag, out.Linkname = tar.TypeSymlink, h.Linkname
			stats.Symlinks++
		default:
			return Stats{}, fmt.Errorf("entry %q: %w", h.Name, refusedType(name, h.Typeflag))
		}
		if err := tw.WriteHeader(out); err != nil {
			return Stats{}, fmt.Errorf("write archive: %w", err)
		}
		if out.Typeflag == tar.TypeReg {
			// tar.Writer refuses more or fewer bytes than the header said; archive/tar's reader
			// gives exactly Size bytes or an error.
			if n, err := io.Copy(tw, tr); err != nil {
				return Stats{}, fmt.Errorf("entry %q: %w", name, err)
			} else if n != h.Size {
				return Stats{}, fmt.Errorf("entry %q: %d of %d bytes: %w", name, n, h.Size, io.ErrUnexpectedEOF)
			}
		}
	}
	if err := src.Finish(ctx, maxTrailing); err != nil {
		return Stats{}, err
	}
	if err := tw.Close(); err != nil {
		return Stats{}, fmt.Errorf("write archive: %w", err)
	}
	return stats, nil
}

// entryName is h's canonical name, checked: relative, no "..", no empty component, no reserved
// name, and, when top is set, top itself or beneath it.
func entryName(h *tar.Header, top string) (string, error) {
	// Tar writes directories with one trailing slash; that is not an empty component.
	name, err := fsguard.Clean(strings.TrimSuffix(h.Name, "/"))
	if err != nil {
		return "", err
	}
	for _, elem := range strings.Split(name, "/") {
		if strings.HasPrefix(elem, StagePrefix) || strings.HasPrefix(elem, fsguard.TempPrefix) {
			return "", invalid(name, "name is reserved for tether's temporary files")
		}
	}
	if top != "" && name != top && !strings.HasPrefix(name, top+"/") {
		return "", invalid(name, fmt.Sprintf("entry is not %s or beneath it", top))
	}
	return name, nil
}

// checkLinkTarget bounds a symlink's target: it is stored, never followed, but must be a name
// the kernel could hold.
func checkLinkTarget(name, target string) error {
	if target == "" || len(target) > fsguard.MaxPathLen || strings.IndexByte(target, 0) >= 0 {
		return invalid(name, "symlink target is empty, too long or holds a NUL byte")
	}
	return nil
}

// refusedType says why an entry of type t is not taken.
func refusedType(name string, t byte) error {
	switch t {
	case tar.TypeLink:
		return invalid(name, "hard links are refused")
	case tar.TypeChar, tar.TypeBlock:
		return invalid(name, "device files are refused")
	case tar.TypeFifo:
		return invalid(name, "fifos are refused")
	}
	return invalid(name, fmt.Sprintf("unsupported tar entry type %q", t))
}
