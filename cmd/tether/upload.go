package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// resumableMin is the size from which a regular file goes through a resumable upload session:
// below it a cut costs little to send again, and one request is quicker than a session.
const resumableMin = 64 << 20

// resumeFlags choose how a file put uses upload sessions.
type resumeFlags struct {
	resume    bool   // continue the session of this path and content
	session   string // continue this session
	resumable bool   // use a session whatever the size
	chunk     int64  // chunk size (0: the client's default)
	again     string // the command that resumes this one, said when it is interrupted
}

func (f *resumeFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.resume, "resume", false, "continue an interrupted upload of this file to this path from the offset the runner verified")
	cmd.Flags().StringVar(&f.session, "session", "", "continue the upload session with this id (implies --resume)")
	cmd.Flags().BoolVar(&f.resumable, "resumable", false, fmt.Sprintf("send through a resumable upload session even below %d MiB", resumableMin>>20))
	cmd.Flags().Int64Var(&f.chunk, "chunk-size", 0, fmt.Sprintf("bytes per chunk of a resumable upload (default %d MiB, at most %d MiB)", client.DefaultUploadChunk>>20, protocol.MaxUploadChunk>>20))
}

// putFile writes the local file (or stdin, as "-") to remote in workspace ws: one streamed
// request, or, for a large regular file (or when asked), a resumable upload session.
func (c *cli) putFile(ctx context.Context, cl *client.Client, ws, local, remote, label string, o client.WriteOptions, rf resumeFlags) (protocol.FsWriteResult, error) {
	if rf.chunk < 0 || rf.chunk > protocol.MaxUploadChunk {
		return protocol.FsWriteResult{}, usageError{fmt.Errorf("--chunk-size %d: want at most %d bytes", rf.chunk, protocol.MaxUploadChunk)}
	}
	src, f, closeSrc, err := c.openUpload(local, &o)
	if err != nil {
		return protocol.FsWriteResult{}, err
	}
	defer closeSrc()
	continuing := rf.resume || rf.session != ""
	if f == nil && (continuing || rf.resumable) {
		return protocol.FsWriteResult{}, usageError{fmt.Errorf("%s is not a regular file: only a regular file can be sent resumably", local)}
	}
	bar := c.newProgress(label)
	defer bar.finish()
	bar.setTotal(o.Size)
	if f == nil || (!continuing && !rf.resumable && o.Size < resumableMin) {
		o.Progress = bar.add
		return cl.WriteFile(ctx, ws, remote, src, o)
	}
	if o.IfSHA256 != "" {
		return protocol.FsWriteResult{}, usageError{fmt.Errorf("--if-sha256 is not available with a resumable upload; use --replace")}
	}
	u, err := c.findOrStartUpload(ctx, cl, ws, remote, o, rf)
	if err != nil {
		return protocol.FsWriteResult{}, err
	}
	if u.Result == nil {
		u, err = cl.UploadFile(ctx, ws, u.ID, f, client.UploadOptions{ChunkSize: rf.chunk, Progress: bar.add})
	}
	if err != nil {
		bar.finish()
		// The offset the runner verified, if it can be asked; the hint says how to go on.
		if now, gerr := cl.GetUpload(context.WithoutCancel(ctx), ws, u.ID); gerr == nil {
			u = now
		}
		again := rf.again
		if again == "" {
			again = "tether files put --resume " + shellQuote(ws) + " " + shellQuote(local) + " " + shellQuote(remote)
		}
		fmt.Fprintf(c.stderr, "upload %s stopped at %d of %d bytes; continue it with:\n  %s\n", u.ID, u.Offset, u.Size, again)
		return protocol.FsWriteResult{}, err
	}
	if u.Result == nil {
		return protocol.FsWriteResult{}, protocol.Errorf(protocol.CodeFailed, "upload %s ended without a result", u.ID)
	}
	return *u.Result, nil
}

// findOrStartUpload finds the session to continue (by id, or by path and content) or starts one.
func (c *cli) findOrStartUpload(ctx context.Context, cl *client.Client, ws, remote string, o client.WriteOptions, rf resumeFlags) (api.Upload, error) {
	switch {
	case rf.session != "":
		u, err := cl.GetUpload(ctx, ws, rf.session)
		if err != nil {
			return u, err
		}
		if u.Path != remote || u.Size != o.Size || u.SHA256 != o.SHA256 {
			return u, protocol.Errorf(protocol.CodeConflict, "upload %s is of %s (%d bytes, sha256 %s), not of this file to %s (%d bytes, sha256 %s)",
				u.ID, u.Path, u.Size, u.SHA256, remote, o.Size, o.SHA256)
		}
		return u, nil
	case rf.resume:
		list, err := cl.ListUploads(ctx, ws, remote, o.SHA256)
		if err != nil {
			return api.Upload{}, err
		}
		if len(list) == 0 {
			return api.Upload{}, protocol.Errorf(protocol.CodeNotFound,
				"no upload of this file (sha256 %s) to %s to resume (expired, aborted, or never started); run it again without --resume", o.SHA256, remote)
		}
		// The newest: an older one of the same content was abandoned for it.
		return list[len(list)-1], nil
	}
	return cl.CreateUpload(ctx, ws, api.UploadCreate{Path: remote, Size: o.Size, SHA256: o.SHA256, Mode: o.Mode, Replace: o.Replace})
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
