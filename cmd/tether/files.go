package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

func newFilesCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "files",
		Aliases: []string{"fs"},
		Short:   "List, read, write, move and remove files in a workspace",
		Long: "Paths are relative to the workspace root. An absolute path inside the root (/workspace/x when\n" +
			"the root is /workspace) means that relative path (x); any other absolute path is refused\n" +
			"(path_escape). \"..\" and symlinks anywhere in a path are refused by the runner's guard;\n" +
			"symlinks are listed and described, never followed. Directories are copied with `tether cp`.\n\n" +
			"Reads (ls, stat, get) say where they came from. A workspace with a live allocation is read\n" +
			"live (source: live, with the allocation id). A closed workspace is read from its last saved\n" +
			"snapshot (source: saved, with the snapshot id and save time); the plain output then notes\n" +
			"\"source: saved (SNAP, saved TIME)\" on stderr, and --json output carries source,\n" +
			"allocation_id, snapshot_id and saved_at. A workspace whose runner is not connected is\n" +
			"unavailable (exit 15): its files may hold unsaved work, so no older save is shown instead.\n\n" +
			"Writes to a stopped or closed workspace are refused (conflict), saying how to start or reopen\n" +
			"it; --wake starts or reopens it first (reads then come from the live tree too).",
	}
	cmd.AddCommand(newFilesLsCmd(c), newFilesStatCmd(c), newFilesGetCmd(c), newFilesPutCmd(c),
		newFilesMkdirCmd(c), newFilesRmCmd(c), newFilesMvCmd(c), newFilesChmodCmd(c), newFilesWatchCmd(c))
	c.addWakeFlag(cmd, true)
	return cmd
}

func newFilesLsCmd(c *cli) *cobra.Command {
	var asJSON, long bool
	cmd := &cobra.Command{
		Use:     "ls ID [PATH]",
		Aliases: []string{"list"},
		Short:   "List a directory (default: the workspace root), sorted by name",
		Args:    rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			dir := "."
			if len(args) == 2 {
				if dir, err = remotePath(cmd.Context(), cl, args[0], args[1]); err != nil {
					return err
				}
			}
			entries, src, err := listAll(cmd.Context(), cl, args[0], dir)
			if err != nil {
				return err
			}
			if asJSON {
				// One array of entries, each saying where it was read from.
				for i := range entries {
					entries[i].ReadSource = src
				}
				return c.printJSON(entries)
			}
			c.noteSaved(src)
			if !long {
				for _, e := range entries {
					c.printf("%s\n", shortEntry(e))
				}
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTYPE\tMODE\tSIZE\tMTIME")
			for _, e := range entries {
				name := display(e.Name)
				if e.Type == protocol.FileSymlink {
					name += " -> " + display(e.LinkTarget)
				}
				fmt.Fprintf(tw, "%s\t%s\t%04o\t%d\t%s\n", name, e.Type, e.Mode, e.Size, e.MTime.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array of every entry (each with its source)")
	cmd.Flags().BoolVarP(&long, "long", "l", false, "print a table: name, type, mode, size, modification time")
	return cmd
}

// listAll follows the listing's cursor to the end, so callers see the whole directory whatever the
// runner's page size. Every page must come from the same source: a listing whose pages mix the
// live tree and a saved copy (the workspace closed or reopened meanwhile) is refused.
func listAll(ctx context.Context, cl *client.Client, id, dir string) ([]protocol.FileInfo, protocol.ReadSource, error) {
	entries := []protocol.FileInfo{}
	cursor := ""
	var src protocol.ReadSource
	for {
		page, err := cl.ListFiles(ctx, id, dir, cursor, 0)
		if err != nil {
			return nil, src, err
		}
		if cursor == "" {
			src = page.ReadSource
		} else if !sameSource(src, page.ReadSource) {
			return nil, src, protocol.Errorf(protocol.CodeConflict, "the listing of %s moved from %s to %s between pages; list again",
				dir, describeSource(src), describeSource(page.ReadSource))
		}
		entries = append(entries, page.Entries...)
		if page.Next == "" {
			return entries, src, nil
		}
		if page.Next <= cursor {
			// A cursor that does not advance would loop forever.
			return nil, src, protocol.Errorf(protocol.CodeInternal, "listing of %s did not advance past %q", dir, cursor)
		}
		cursor = page.Next
	}
}

func sameSource(a, b protocol.ReadSource) bool {
	return a.Source == b.Source && a.AllocationID == b.AllocationID && a.SnapshotID == b.SnapshotID
}

// describeSource says in words where a read came from: "live (al_…)" or
// "saved (snap_…, saved 2006-01-02T15:04:05Z)".
func describeSource(src protocol.ReadSource) string {
	switch src.Source {
	case protocol.SourceLive:
		return "live (" + src.AllocationID + ")"
	case protocol.SourceSaved:
		at := ""
		if src.SavedAt != nil {
			at = ", saved " + src.SavedAt.UTC().Format(time.RFC3339)
		}
		return "saved (" + src.SnapshotID + at + ")"
	case "":
		return "unknown"
	}
	return display(src.Source)
}

// noteSaved tells the operator on stderr that what they read is a saved copy, not the live
// workspace. Stdout is left to the answer itself.
func (c *cli) noteSaved(src protocol.ReadSource) {
	if src.Source == protocol.SourceSaved {
		fmt.Fprintf(c.stderr, "source: %s\n", describeSource(src))
	}
}

// shortEntry is one line of a plain listing: directories end in "/", links show their target.
func shortEntry(e protocol.FileInfo) string {
	switch e.Type {
	case protocol.FileDir:
		return display(e.Name) + "/"
	case protocol.FileSymlink:
		return display(e.Name) + " -> " + display(e.LinkTarget)
	}
	return display(e.Name)
}

// display quotes a name that holds control characters or invalid UTF-8: a file name chosen by
// whatever ran in the sandbox must not be able to drive the operator's terminal or fake a line.
func display(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func newFilesStatCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stat ID PATH",
		Short: "Describe one path; a symlink is described, never followed",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := remotePath(cmd.Context(), cl, args[0], args[1])
			if err != nil {
				return err
			}
			fi, err := cl.StatFile(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(fi)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "Path:\t%s\nType:\t%s\nMode:\t%04o\nSize:\t%d\nModified:\t%s\n",
				display(fi.Path), fi.Type, fi.Mode, fi.Size, fi.MTime.Local().Format(time.RFC3339Nano))
			if fi.Type == protocol.FileSymlink {
				fmt.Fprintf(tw, "Target:\t%s\n", display(fi.LinkTarget))
			}
			fmt.Fprintf(tw, "Source:\t%s\n", describeSource(fi.ReadSource))
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entry as JSON, with its source")
	return cmd
}

// getResult is what `files get -o FILE --json` prints.
type getResult struct {
	Path   string `json:"path"`
	Output string `json:"output"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	protocol.ReadSource
}

func newFilesGetCmd(c *cli) *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get ID PATH [-o FILE [--json]]",
		Short: "Read a file to stdout or, with -o, to a local file; the content's SHA-256 is verified",
		Long: "Reads a whole file and verifies its byte count and SHA-256 against the runner's (or, for a\n" +
			"closed workspace, its saved copy's manifest).\n" +
			"With -o the file is written beside FILE under a temporary name and renamed into place only\n" +
			"once verified, so FILE is never left half-written. On stdout, a failed read may already\n" +
			"have printed part of the file; the exit status says it failed.\n\n" +
			"Stdout carries nothing but the file. A read of a saved copy notes\n" +
			"\"source: saved (SNAP, saved TIME)\" on stderr; with -o FILE, --json prints the path, byte\n" +
			"count, SHA-256 and source (source, allocation_id or snapshot_id and saved_at) instead.",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			toStdout := out == "" || out == "-"
			if asJSON && toStdout {
				return usageError{fmt.Errorf("--json needs -o FILE: without it, stdout carries the file itself")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			remote, err := remotePath(cmd.Context(), cl, args[0], args[1])
			if err != nil {
				return err
			}
			if toStdout {
				var bar *progress // none when the file itself is going to the terminal
				if !c.stdoutIsTerminal() {
					bar = c.newProgress("get " + args[1])
				}
				res, err := cl.ReadFile(cmd.Context(), args[0], remote, c.stdout, client.ReadOptions{Progress: bar.read})
				bar.finish()
				if err != nil {
					return dirHint(cmd.Context(), cl, args[0], remote, err)
				}
				c.noteSaved(res.ReadSource)
				return nil
			}
			res, err := c.getToFile(cmd.Context(), cl, args[0], remote, out)
			if err != nil {
				return dirHint(cmd.Context(), cl, args[0], remote, err)
			}
			if asJSON {
				return c.printJSON(getResult{Path: args[1], Output: out, Bytes: res.Bytes, SHA256: res.SHA256, ReadSource: res.ReadSource})
			}
			c.noteSaved(res.ReadSource)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this local file instead of stdout")
	cmd.Flags().BoolVar(&asJSON, "json", false, "with -o: print the result (bytes, sha256, source) as JSON")
	return cmd
}

// getToFile reads into a temporary file beside dst and renames it over dst only after the read was
// verified; on any failure the temporary file is removed and dst is left as it was.
func (c *cli) getToFile(ctx context.Context, cl *client.Client, id, remote, dst string) (res client.ReadResult, err error) {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := dst + ".tmp-" + hex.EncodeToString(suffix[:])
	// 0666 before the umask, like any file a shell redirection makes; O_EXCL so an existing file
	// (or a symlink planted under the temporary name) is never written through.
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return res, localError("create", tmp, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	bar := c.newProgress("get " + remote)
	res, err = cl.ReadFile(ctx, id, remote, f, client.ReadOptions{Progress: bar.read})
	bar.finish()
	if err != nil {
		return res, err
	}
	if err = f.Sync(); err != nil {
		return res, localError("sync", tmp, err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return res, localError("close", tmp, err)
	}
	if err = os.Rename(tmp, dst); err != nil {
		return res, localError("rename", dst, err)
	}
	return res, nil
}

// localError gives failures on the operator's own files a code that says what went wrong.
func localError(op, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return protocol.Errorf(protocol.CodeNotFound, "%s %s: %v", op, path, err)
	case errors.Is(err, fs.ErrExist):
		return protocol.Errorf(protocol.CodeExists, "%s %s: %v", op, path, err)
	}
	return protocol.Errorf(protocol.CodeFailed, "%s %s: %v", op, path, err)
}

func newFilesPutCmd(c *cli) *cobra.Command {
	var o client.WriteOptions
	var rf resumeFlags
	var mode string
	var asJSON, parents bool
	cmd := &cobra.Command{
		Use:   "put ID LOCAL PATH",
		Short: "Write a local file (or stdin, as -) to PATH; published only once complete and verified",
		Long: "Streams LOCAL into the workspace. The runner writes a temporary file beside PATH and\n" +
			"renames it into place only when every byte arrived and, for a regular LOCAL file, its\n" +
			"SHA-256 matches the one computed here first. An existing PATH is kept (error: exists)\n" +
			"unless --replace, or --if-sha256 names its current content.\n\n" +
			"A regular file of 64 MiB or more (or any, with --resumable) goes through a resumable\n" +
			"upload session, in chunks the runner stages outside the workspace; the file is published\n" +
			"only when the whole SHA-256 matches. If the put is interrupted, run it again with\n" +
			"--resume (or --session ID): it continues from the last offset the runner verified.\n" +
			"Sessions expire after 24 hours.",
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if mode != "" {
				m, err := parseMode(mode)
				if err != nil {
					return err
				}
				o.Mode = m
			}
			if o.IfSHA256 != "" && !isSHA256(o.IfSHA256) {
				return usageError{fmt.Errorf("--if-sha256 %q: want 64 hex digits", o.IfSHA256)}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			remote, err := remotePath(cmd.Context(), cl, args[0], args[2])
			if err != nil {
				return err
			}
			if parents {
				if err := mkParents(cmd.Context(), cl, args[0], remote); err != nil {
					return err
				}
			}
			res, err := c.putFile(cmd.Context(), cl, args[0], args[1], remote, "put "+args[2], o, rf)
			if err != nil {
				return err
			}
			if o.SHA256 != "" && res.SHA256 != o.SHA256 {
				// The runner verifies this before publishing; a mismatch here means a broken peer.
				return protocol.Errorf(protocol.CodeFailed, "runner reported sha256 %s for %s, expected %s", res.SHA256, res.Path, o.SHA256)
			}
			if asJSON {
				return c.printJSON(res)
			}
			c.printf("%s: %d bytes, sha256 %s\n", display(res.Path), res.Bytes, res.SHA256)
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.Replace, "replace", false, "replace an existing file")
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create PATH's missing parent directories first (each through the guard)")
	cmd.Flags().StringVar(&o.IfSHA256, "if-sha256", "", "replace only if the current content has this SHA-256 (else error: conflict)")
	cmd.Flags().StringVar(&mode, "mode", "", "permission bits of the file, octal (default 0644)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	rf.add(cmd)
	return cmd
}

// openUpload opens LOCAL. A regular file is hashed first, so the runner can refuse to publish
// content that differs from what is on disk here (a file changed while it was sent), and is
// returned as a file too (a resumable upload reads it at offsets); stdin and other streams can
// only be sent as they come, protected by the transfer's own count and digest.
func (c *cli) openUpload(local string, o *client.WriteOptions) (io.Reader, *os.File, func(), error) {
	if local == "-" {
		// A stream cannot be read twice: it is hashed as it is sent, and the runner checks the
		// digest that follows it before publishing.
		o.HashAsSent = true
		return c.stdin, nil, func() {}, nil
	}
	f, err := os.Open(local)
	if err != nil {
		return nil, nil, nil, localError("open", local, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, nil, localError("stat", local, err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, nil, protocol.Errorf(protocol.CodeInvalidArgument, "%s is a directory; put sends one file: copy directories with `tether cp %s WORKSPACE:PATH`", local, local)
	}
	if !fi.Mode().IsRegular() {
		o.HashAsSent = true // a fifo or a device is read once, like stdin
		return f, nil, func() { f.Close() }, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, nil, nil, localError("read", local, err)
	}
	o.SHA256, o.Size = hex.EncodeToString(h.Sum(nil)), n
	// Exactly the hashed length is sent; a file that grew meanwhile fails the runner's check
	// instead of sending more than Content-Length promised.
	return io.LimitReader(f, n+1), f, func() { f.Close() }, nil
}

func isSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// parseMode reads octal permission bits such as 644 or 0755.
func parseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, usageError{fmt.Errorf("mode %q: want octal permission bits between 0000 and 0777", s)}
	}
	return uint32(m), nil
}

func newFilesMkdirCmd(c *cli) *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:   "mkdir ID PATH",
		Short: "Create a directory",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := remotePath(cmd.Context(), cl, args[0], args[1])
			if err != nil {
				return err
			}
			_, err = cl.Mkdir(cmd.Context(), args[0], p, parents, 0)
			return err
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; no error if it exists")
	return cmd
}

func newFilesRmCmd(c *cli) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm ID PATH",
		Short: "Remove a file, symlink or empty directory (-r: a whole tree, never following links)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := remotePath(cmd.Context(), cl, args[0], args[1])
			if err != nil {
				return err
			}
			return cl.Remove(cmd.Context(), args[0], p, recursive)
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything in it")
	return cmd
}

func newFilesMvCmd(c *cli) *cobra.Command {
	var replace bool
	cmd := &cobra.Command{
		Use:   "mv ID FROM TO",
		Short: "Rename FROM to TO; an existing TO is kept (error: exists) unless --replace",
		Args:  exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			from, err := remotePath(cmd.Context(), cl, args[0], args[1])
			if err != nil {
				return err
			}
			to, err := remotePath(cmd.Context(), cl, args[0], args[2])
			if err != nil {
				return err
			}
			_, err = cl.Rename(cmd.Context(), args[0], from, to, replace)
			return err
		},
	}
	cmd.Flags().BoolVar(&replace, "replace", false, "replace an existing destination")
	return cmd
}

func newFilesChmodCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "chmod ID MODE PATH",
		Short: "Set permission bits (octal); a symlink is refused, never followed",
		Args:  exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := parseMode(args[1])
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := remotePath(cmd.Context(), cl, args[0], args[2])
			if err != nil {
				return err
			}
			_, err = cl.Chmod(cmd.Context(), args[0], p, m)
			return err
		},
	}
}

// rangeArgs is cobra.RangeArgs with a usage-typed error.
func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageError{fmt.Errorf("%s takes %d to %d arguments, got %d", cmd.CommandPath(), lo, hi, len(args))}
		}
		return nil
	}
}

// mkParents creates the missing parent directories of the workspace path p, each through the
// runner's guard (a symlink among them is refused, never followed).
func mkParents(ctx context.Context, cl *client.Client, ws, p string) error {
	parent := path.Dir(p)
	if parent == "." || parent == "/" {
		return nil
	}
	_, err := cl.Mkdir(ctx, ws, parent, true, 0)
	return err
}

// dirHint turns a read refused because p is a directory into advice: directories travel with
// `tether cp`. Any other error is returned as it is.
func dirHint(ctx context.Context, cl *client.Client, ws, p string, err error) error {
	if protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		return err
	}
	if fi, serr := cl.StatFile(ctx, ws, p); serr == nil && fi.Type == protocol.FileDir {
		return protocol.Errorf(protocol.CodeInvalidArgument, "%s is a directory; get reads one file: copy directories with `tether cp %s:%s LOCAL`", p, ws, p)
	}
	return err
}
