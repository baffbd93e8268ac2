package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/tree"
)

func newCpCmd(c *cli) *cobra.Command {
	var parents bool
	var rf resumeFlags
	cmd := &cobra.Command{
		Use:   "cp SRC DEST",
		Short: "Copy files or directories between the host and a workspace (WORKSPACE:PATH)",
		Long: "Copies like docker cp: one side is a local path, the other WORKSPACE:PATH (a workspace id\n" +
			"or name, then a path relative to its root; an absolute path inside the root is accepted).\n\n" +
			"  tether cp LOCAL WS:PATH    a file becomes PATH (or PATH/NAME when PATH is a directory),\n" +
			"                             replacing a file there; a directory becomes PATH when PATH does\n" +
			"                             not exist, else PATH/NAME\n" +
			"  tether cp WS:PATH LOCAL    the same rules on the host\n" +
			"  tether cp - WS:DIR         a tar stream on stdin, extracted into the directory DIR\n" +
			"  tether cp WS:PATH -        a tar of PATH on stdout\n\n" +
			"Directories travel as tar streams through the runner's guard (no symlink followed; symlinks\n" +
			"copied as links; hard links, devices and fifos refused, sockets left out) and appear whole\n" +
			"or not at all: everything is staged beside the destination and renamed into place only once\n" +
			"the whole stream arrived and checked. A directory never merges into an existing one: a\n" +
			"destination that exists is refused (exists). On the host the same checks apply to what the\n" +
			"workspace sends: no name outside the destination, no absolute name or \"..\", no symlink\n" +
			"followed. LOCAL itself may be a symlink (it is your argument); nothing beneath it is followed.\n" +
			"A progress bar is drawn on a terminal. A single file of 64 MiB or more goes through a\n" +
			"resumable upload session (see tether files put): an interrupted copy continues with --resume.",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst := parseCpArg(args[0]), parseCpArg(args[1])
			switch {
			case src.remote && dst.remote:
				return usageError{fmt.Errorf("both %q and %q name a workspace; one side must be a local path (copy through the host)", args[0], args[1])}
			case !src.remote && !dst.remote:
				return usageError{fmt.Errorf("neither %q nor %q names a workspace: write one side as WORKSPACE:PATH (a local path holding \":\" can be written ./NAME)", args[0], args[1])}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			rf.again = "tether cp --resume " + shellQuote(args[0]) + " " + shellQuote(args[1])
			cp := &copier{c: c, cl: cl, parents: parents, resume: rf}
			if dst.remote {
				if dst.path, err = remotePath(cmd.Context(), cl, dst.ws, dst.path); err != nil {
					return err
				}
				return cp.in(cmd.Context(), src.path, dst.ws, dst.path)
			}
			if src.path, err = remotePath(cmd.Context(), cl, src.ws, src.path); err != nil {
				return err
			}
			return cp.out(cmd.Context(), src.ws, src.path, dst.path)
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create the destination's missing parent directories (in the workspace, each through the guard)")
	rf.add(cmd)
	c.addWakeFlag(cmd, false)
	return cmd
}

// cpArg is one side of a cp.
type cpArg struct {
	remote   bool
	ws, path string
}

// parseCpArg reads WORKSPACE:PATH, like docker cp: a colon before any slash names a workspace,
// so a local name holding a colon can be written ./NAME. "WS:" is the workspace root.
func parseCpArg(s string) cpArg {
	ws, p, ok := strings.Cut(s, ":")
	if !ok || ws == "" || strings.Contains(ws, "/") {
		return cpArg{path: s}
	}
	if p == "" {
		p = "."
	}
	return cpArg{remote: true, ws: ws, path: p}
}

type copier struct {
	c       *cli
	cl      *client.Client
	parents bool
	resume  resumeFlags // a single file's resumable upload
}

// in copies the local path src (or, as "-", a tar on stdin) to dst in workspace ws.
func (cp *copier) in(ctx context.Context, src, ws, dst string) error {
	cur, err := cp.cl.StatFile(ctx, ws, dst)
	exists := err == nil
	if err != nil && protocol.CodeOf(err) != protocol.CodeNotFound {
		return err
	}
	if src == "-" {
		if !exists && cp.parents {
			if _, err := cp.cl.Mkdir(ctx, ws, dst, true, 0); err != nil {
				return err
			}
		} else if !exists {
			return protocol.Errorf(protocol.CodeNotFound, "%s:%s does not exist; a tar stream is extracted into an existing directory (or use --parents)", ws, dst)
		} else if cur.Type != protocol.FileDir {
			return protocol.Errorf(protocol.CodeNotDirectory, "%s:%s is not a directory; a tar stream is extracted into a directory", ws, dst)
		}
		bar := cp.c.newProgress("cp - " + ws + ":" + dst)
		res, err := cp.cl.ImportTree(ctx, ws, dst, progressReader{cp.c.stdin, bar.add})
		bar.finish()
		if err != nil {
			return err
		}
		fmt.Fprintf(cp.c.stderr, "copied %s into %s:%s\n", counts(res.Files, res.Dirs, res.Symlinks, res.Bytes), ws, display(dst))
		return nil
	}
	fi, err := os.Stat(src)
	if err != nil {
		return localError("stat", src, err)
	}
	name := localBase(src)
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return protocol.Errorf(protocol.CodeInvalidArgument, "%s is not a regular file or a directory", src)
		}
		target := dst
		if exists && cur.Type == protocol.FileDir {
			target = path.Join(dst, name)
		}
		return cp.fileIn(ctx, src, fi, ws, target)
	}
	// A directory: into dst when it is one (dst/NAME), else as dst itself.
	dir, top := dst, name
	switch {
	case exists && cur.Type != protocol.FileDir:
		return protocol.Errorf(protocol.CodeExists, "%s:%s exists and is not a directory; a directory is not copied onto it", ws, display(dst))
	case !exists:
		dir, top = path.Dir(dst), path.Base(dst)
		if cp.parents && dir != "." {
			if _, err := cp.cl.Mkdir(ctx, ws, dir, true, 0); err != nil {
				return err
			}
		}
	}
	bar := cp.c.newProgress("cp " + src)
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(tree.Write(ctx, pw, src, tree.WriteOptions{Prefix: top, SkipSpecial: true, Progress: bar.add}))
	}()
	res, err := cp.cl.ImportTree(ctx, ws, dir, pr)
	pr.CloseWithError(errors.New("import ended"))
	bar.finish()
	if err != nil {
		return err
	}
	cp.c.printf("copied %s to %s:%s\n", counts(res.Files, res.Dirs, res.Symlinks, res.Bytes), ws, display(path.Join(dir, top)))
	return nil
}

// fileIn writes one local file to target, replacing a file there, with its permission bits.
func (cp *copier) fileIn(ctx context.Context, src string, fi fs.FileInfo, ws, target string) error {
	if cp.parents {
		if err := mkParents(ctx, cp.cl, ws, target); err != nil {
			return err
		}
	}
	o := client.WriteOptions{Replace: true, Mode: uint32(fi.Mode().Perm())}
	if o.Mode == 0 {
		// Mode 0 means "the default" on the wire; a file with no permission bits keeps none
		// only through a chmod, which cp does not do for so rare a case.
		o.Mode = 0o644
	}
	res, err := cp.c.putFile(ctx, cp.cl, ws, src, target, "cp "+src, o, cp.resume)
	if err != nil {
		return err
	}
	cp.c.printf("copied %s to %s:%s\n", counts(1, 0, 0, res.Bytes), ws, display(res.Path))
	return nil
}

// out copies src of workspace ws to the local path dst (or, as "-", a tar on stdout).
func (cp *copier) out(ctx context.Context, ws, src, dst string) error {
	if dst == "-" {
		ex, err := cp.cl.ExportTree(ctx, ws, src, "")
		if err != nil {
			return err
		}
		defer ex.Close()
		var bar *progress // none when the tar itself goes to the terminal
		if !cp.c.stdoutIsTerminal() {
			bar = cp.c.newProgress("cp " + ws + ":" + src)
		}
		_, err = io.Copy(cp.c.stdout, progressReader{ex, bar.add})
		bar.finish()
		if err != nil {
			return err
		}
		cp.noteSkipped(ex)
		return nil
	}
	fi, err := cp.cl.StatFile(ctx, ws, src)
	if err != nil {
		return err
	}
	name := path.Base(src)
	if src == "." {
		if name, err = cp.rootName(ctx, ws); err != nil {
			return err
		}
	}
	// Where it lands: dst/NAME when dst is a directory, else dst itself.
	parent, top := filepath.Dir(dst), filepath.Base(dst)
	lfi, lerr := os.Stat(dst)
	switch {
	case lerr == nil && lfi.IsDir():
		parent, top = dst, name
	case lerr == nil && fi.Type == protocol.FileDir:
		return protocol.Errorf(protocol.CodeExists, "%s exists and is not a directory; a directory is not copied onto it", dst)
	case lerr != nil && !errors.Is(lerr, fs.ErrNotExist):
		return localError("stat", dst, lerr)
	}
	if fi.Type == protocol.FileRegular {
		// One file: read and verified against the runner's SHA-256, renamed over the target.
		res, err := cp.c.getToFile(ctx, cp.cl, ws, src, filepath.Join(parent, top))
		if err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(parent, top), fs.FileMode(fi.Mode).Perm()); err != nil {
			return localError("chmod", filepath.Join(parent, top), err)
		}
		cp.c.printf("copied %s to %s\n", counts(1, 0, 0, res.Bytes), filepath.Join(parent, top))
		return nil
	}
	if cp.parents {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return localError("mkdir", parent, err)
		}
	}
	stats, ex, err := cp.extract(ctx, ws, src, parent, top)
	if err != nil {
		return err
	}
	cp.noteSkipped(ex)
	cp.c.printf("copied %s to %s\n", counts(stats.Files, stats.Dirs, stats.Symlinks, stats.Bytes), filepath.Join(parent, top))
	return nil
}

// extract receives a tar of src and publishes it as parent/top on the host, whole or not at all.
// The stream comes from an untrusted runner (relayed and checked by the controller, and checked
// again here): tree.Extract works through the same guard the runner uses, on the host directory
// parent, takes only entries named top or beneath it, refuses absolute names, "..", hard links,
// devices and any path through a symlink, stages everything in a fresh directory inside parent
// and renames top into place (never replacing anything) only after the whole archive arrived,
// ended with its end marker, and the controller confirmed it (TreeExport's EOF).
func (cp *copier) extract(ctx context.Context, ws, src, parent, top string) (tree.Stats, *client.TreeExport, error) {
	abs, err := filepath.Abs(parent)
	if err != nil {
		return tree.Stats{}, nil, localError("resolve", parent, err)
	}
	root, err := fsguard.Open(abs)
	if err != nil {
		return tree.Stats{}, nil, hostGuardError(parent, err)
	}
	defer root.Close()
	ex, err := cp.cl.ExportTree(ctx, ws, src, top)
	if err != nil {
		return tree.Stats{}, nil, err
	}
	defer ex.Close()
	bar := cp.c.newProgress("cp " + ws + ":" + src)
	stats, err := tree.Extract(ctx, root, progressReader{ex, bar.add}, tree.ExtractOptions{Only: top})
	bar.finish()
	if err != nil {
		return stats, ex, hostGuardError(filepath.Join(parent, top), err)
	}
	return stats, ex, nil
}

// hostGuardError types a refusal of the host-side guard for the CLI's exit status, naming the
// host path.
func hostGuardError(where string, err error) error {
	if code := fsguard.CodeOf(err); code != "" {
		return protocol.Errorf(protocol.Code(code), "%s: %v", where, err)
	}
	if protocol.CodeOf(err) != protocol.CodeInternal {
		return err
	}
	return protocol.Errorf(protocol.CodeFailed, "%s: %v", where, err)
}

// rootName is the archive name of the workspace root: its base name inside the sandbox.
func (cp *copier) rootName(ctx context.Context, ws string) (string, error) {
	rec, err := cp.cl.GetWorkspace(ctx, ws)
	if err != nil {
		return "", err
	}
	name := path.Base(rec.Root)
	if name == "/" || name == "." || name == "" {
		name = "workspace"
	}
	return name, nil
}

// noteSkipped tells the operator on stderr about special files the runner left out.
func (cp *copier) noteSkipped(ex *client.TreeExport) {
	if ex != nil && ex.Skipped > 0 {
		fmt.Fprintf(cp.c.stderr, "note: %d sockets, fifos or devices were left out\n", ex.Skipped)
	}
}

// localBase is the name a local path gives its copy: its base name ("." and "/" resolved).
func localBase(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return filepath.Base(p)
}

// counts says what a copy moved.
func counts(files, dirs, links int, bytes int64) string {
	s := fmt.Sprintf("%d files", files)
	if dirs > 0 {
		s += fmt.Sprintf(", %d dirs", dirs)
	}
	if links > 0 {
		s += fmt.Sprintf(", %d symlinks", links)
	}
	return s + fmt.Sprintf(" (%d bytes)", bytes)
}

// progressWriter tells every write's length (a nil tell is a nil bar's add: nothing).
type progressWriter struct {
	w    io.Writer
	tell func(int64)
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if n > 0 {
		p.tell(int64(n))
	}
	return n, err
}

// progressReader tells every read's length (a nil tell is a nil bar's add: nothing).
type progressReader struct {
	r    io.Reader
	tell func(int64)
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.tell(int64(n))
	}
	return n, err
}
