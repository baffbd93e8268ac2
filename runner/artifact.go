package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

// XattrUntrusted labels every installed artifact where the filesystem supports extended
// attributes; the label also travels in the install log and the controller's record.
const XattrUntrusted = "user.tether.untrusted"

// artifactFileMode is the mode of an installed artifact: data, never executable.
const artifactFileMode = 0o644

// installArtifact asks the controller for an artifact's bytes and installs them at dest, a new
// workspace-relative file. The bytes are checked against the controller's record (count and
// SHA-256) before they are published; the identical request repeated once the file is in place
// succeeds again as a replay and changes nothing. Every refusal leaves the file unwritten.
func (r *Runner) installArtifact(ctx context.Context, artifactID, dest string) (protocol.ArtifactInstall, error) {
	var out protocol.ArtifactInstall
	if artifactID == "" {
		return out, protocol.Errorf(protocol.CodeInvalidArgument, "an artifact id is required")
	}
	clean, err := fsguard.Clean(dest)
	if err != nil {
		return out, err
	}
	if clean == "." {
		return out, protocol.Errorf(protocol.CodeInvalidPath, "destination must name a file below the workspace root")
	}
	if strings.HasPrefix(path.Base(clean), fsguard.TempPrefix) {
		return out, protocol.Errorf(protocol.CodeInvalidPath, "%s: name is reserved for temporary files", clean)
	}

	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess == nil {
		return out, protocol.Errorf(protocol.CodeUnavailable, "the runner is not connected to the controller")
	}
	st, err := sess.OpenStream()
	if err != nil {
		return out, protocol.Errorf(protocol.CodeUnavailable, "open a stream to the controller: %v", err)
	}
	defer st.Close()
	// Cancelling the request (the agent hung up, the runner stops) ends the transfer.
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()

	raw, _ := json.Marshal(protocol.ArtifactFetchArgs{ArtifactID: artifactID})
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpArtifactFetch, Epoch: r.epoch.Load(), Args: raw}); err != nil {
		return out, protocol.Errorf(protocol.CodeUnavailable, "artifact_fetch: %v", err)
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		return out, protocol.Errorf(protocol.CodeUnavailable, "artifact_fetch: reply: %v", err)
	}
	if err := tr.Err(); err != nil {
		return out, err
	}
	var info protocol.ArtifactInfo
	if err := json.Unmarshal(tr.Result, &info); err != nil {
		return out, protocol.Errorf(protocol.CodeInternal, "artifact_fetch: reply: %v", err)
	}
	if info.ID == "" {
		info.ID = artifactID
	}
	info.SHA256 = strings.ToLower(info.SHA256)
	out = protocol.ArtifactInstall{ArtifactID: info.ID, Path: clean, Bytes: info.Bytes, SHA256: info.SHA256, Untrusted: true}

	err = r.withRoot(func(root *fsguard.Root) (err error) {
		if dir := path.Dir(clean); dir != "." {
			created, merr := missingDirs(root, dir)
			if merr != nil {
				return merr
			}
			if merr := root.MkdirAll(dir, 0o755); merr != nil {
				return merr
			}
			// A refused install leaves the workspace as it was: the directories it made go too.
			defer func() {
				if err != nil {
					for i := len(created) - 1; i >= 0; i-- {
						_ = root.Remove(created[i])
					}
				}
			}()
		}
		// A destination already in place is either this very install (a retry) or a refusal.
		same, err := sameContent(root, clean, info)
		if err != nil {
			return err
		}
		if same {
			out.Replayed = true
			return nil
		}
		_, err = root.WriteFile(ctx, clean, protocol.NewBodyReader(st), artifactFileMode, fsguard.WriteOptions{
			Xattrs: map[string]string{XattrUntrusted: "1"},
			Verify: func(res fsguard.WriteResult) error {
				if res.Bytes != info.Bytes || res.SHA256 != info.SHA256 {
					return protocol.Errorf(protocol.CodeDigestMismatch,
						"artifact %s: received %d bytes with sha256 %s; the record says %d bytes with sha256 %s",
						info.ID, res.Bytes, res.SHA256, info.Bytes, info.SHA256)
				}
				// The final trailer is the controller's last word: an artifact revoked as
				// the last bytes went out is not published either.
				var fin protocol.Trailer
				if err := protocol.ReadJSON(st, &fin); err != nil {
					return protocol.Errorf(protocol.CodeUnavailable, "artifact_fetch: final trailer: %v", err)
				}
				return fin.Err()
			},
		})
		if fsguard.CodeOf(err) == fsguard.CodeExists {
			// A concurrent identical install won the race, or something else appeared.
			same, serr := sameContent(root, clean, info)
			if serr != nil {
				return serr
			}
			if same {
				out.Replayed = true
				return nil
			}
			return protocol.Errorf(protocol.CodeConflict, "%s: destination exists", clean)
		}
		return err
	})
	if err != nil {
		if e := ctx.Err(); e != nil {
			err = protocol.Errorf(protocol.CodeCanceled, "artifact %s: %v", artifactID, e)
		}
		return protocol.ArtifactInstall{}, err
	}
	out.InstalledAt = r.cfg.Clock.Now().UTC()
	r.cfg.Logger.Info("artifact installed", "artifact_id", out.ArtifactID, "path", out.Path,
		"bytes", out.Bytes, "sha256", out.SHA256, "untrusted", true, "replayed", out.Replayed)
	r.reportInstall(out)
	return out, nil
}

// sameContent reports whether clean holds exactly the artifact's bytes. No file there is false;
// a file with other content, or anything that is not a regular file, is a conflict; a symlink
// is refused, never followed.
func sameContent(root *fsguard.Root, clean string, info protocol.ArtifactInfo) (bool, error) {
	fi, err := root.Lstat(clean)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return false, protocol.Errorf(protocol.CodeSymlinkRefused, "%s: destination is a symlink", clean)
	case !fi.Mode().IsRegular():
		return false, protocol.Errorf(protocol.CodeConflict, "%s: destination exists and is not a regular file", clean)
	case fi.Size() != info.Bytes:
		return false, protocol.Errorf(protocol.CodeConflict, "%s: destination exists with other content", clean)
	}
	f, err := root.Open(clean)
	if err != nil {
		// Swapped for a symlink or special file since the Lstat.
		if c := fsguard.CodeOf(err); c == fsguard.CodeSymlinkRefused || c == fsguard.CodeNotFound {
			return false, err
		}
		return false, protocol.Errorf(protocol.CodeConflict, "%s: destination exists: %v", clean, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	if hex.EncodeToString(h.Sum(nil)) != info.SHA256 {
		return false, protocol.Errorf(protocol.CodeConflict, "%s: destination exists with other content", clean)
	}
	return true, nil
}

// reportInstall records an install with the controller so `tether run ls` shows it. Best
// effort: the runner's log has it regardless.
func (r *Runner) reportInstall(in protocol.ArtifactInstall) {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess == nil {
		return
	}
	stream, err := sess.OpenStream()
	if err != nil {
		return
	}
	defer stream.Close()
	_ = stream.SetDeadline(time.Now().Add(30 * time.Second))
	raw, err := json.Marshal(in)
	if err != nil {
		return
	}
	if protocol.WriteJSON(stream, protocol.Header{Op: protocol.OpArtifactInstalled, Epoch: r.epoch.Load(), Args: raw}) != nil {
		return
	}
	var tr protocol.Trailer
	if protocol.ReadJSON(stream, &tr) == nil && !tr.OK && tr.Error != nil {
		r.cfg.Logger.Warn("controller did not record the artifact install", "artifact_id", in.ArtifactID, "err", tr.Error)
	}
}

// missingDirs lists the directories of dir (outermost first) that do not exist yet.
func missingDirs(root *fsguard.Root, dir string) ([]string, error) {
	var missing []string
	for d := dir; d != "."; d = path.Dir(d) {
		if _, err := root.Lstat(d); err == nil {
			break
		} else if fsguard.CodeOf(err) != fsguard.CodeNotFound {
			return nil, err
		}
		missing = append([]string{d}, missing...)
	}
	return missing, nil
}
