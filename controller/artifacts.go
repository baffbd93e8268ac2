package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// artifactKey is the content address of an artifact's bytes: equal bytes share one object.
func artifactKey(sha string) string { return "artifacts/" + sha }

// revokeCheckEvery is how many bytes a fetch streams between looks at the artifact's revocation.
const revokeCheckEvery = 4 << 20

// artifactWriteWait bounds each write of a fetch body: a stuck runner does not hold the stream
// forever, while a large artifact may take as long as it needs.
const artifactWriteWait = 30 * time.Second

func validArtifactName(name string) error {
	if len(name) > 255 || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return protocol.Errorf(protocol.CodeInvalidArgument, "artifact name must be at most 255 bytes without control characters")
	}
	return nil
}

// handleArtifactPut stores the request body as an artifact of the workspace: spooled to a temp
// file while hashed, stored under its content address with that hash required, then recorded.
func (s *Server) handleArtifactPut(w http.ResponseWriter, r *http.Request) {
	a, err := s.PutArtifact(r.Context(), r.PathValue("id"), r.URL.Query().Get("name"), r.Body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, a)
}

// PutArtifact stores body as a new, untrusted artifact owned by the workspace.
func (s *Server) PutArtifact(ctx context.Context, idOrName, name string, body io.Reader) (api.Artifact, error) {
	if err := validArtifactName(name); err != nil {
		return api.Artifact{}, err
	}
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return api.Artifact{}, err
	}
	if ws.State == api.StateDeleted {
		return api.Artifact{}, protocol.Errorf(protocol.CodeNotFound, "workspace %q not found", idOrName)
	}
	tmp, err := os.CreateTemp(s.cfg.DataDir, ".artifact-upload-*")
	if err != nil {
		return api.Artifact{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), body)
	if err != nil {
		return api.Artifact{}, protocol.Errorf(protocol.CodeInvalidArgument, "artifact upload cut off after %d bytes: %v", n, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return api.Artifact{}, err
	}
	a := api.Artifact{ID: newID("art_"), WorkspaceID: ws.ID, Name: name, Bytes: n, SHA256: sum,
		ObjectKey: artifactKey(sum), Untrusted: true}
	info, err := s.blobs.Put(ctx, a.ObjectKey, tmp, sum)
	if err != nil {
		return api.Artifact{}, fmt.Errorf("store artifact: %w", err)
	}
	if info.Size != n {
		return api.Artifact{}, protocol.Errorf(protocol.CodeCorrupt, "stored %d bytes of an artifact of %d", info.Size, n)
	}
	a.CreatedAt = s.now()
	if err := s.store.CreateArtifact(context.WithoutCancel(ctx), a); err != nil {
		return api.Artifact{}, err
	}
	return a, nil
}

func (s *Server) handleArtifactList(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := s.store.ListArtifacts(r.Context(), ws.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleArtifactShow(w http.ResponseWriter, r *http.Request) {
	a, err := s.artifact(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// handleArtifactRevoke revokes at once: every later fetch is refused and a fetch in flight is
// aborted at its next revocation check.
func (s *Server) handleArtifactRevoke(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.artifact(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	a, err := s.store.RevokeArtifact(r.Context(), id, s.now())
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("artifact revoked", "artifact", a.ID, "workspace", a.WorkspaceID, "at", a.RevokedAt)
	writeJSON(w, http.StatusOK, a)
}

// unavailableArtifact is the one refusal of a runner's request (op) for an artifact its workspace
// may not have: a missing id and another workspace's (owner, else "") get the same code and the
// same words — not even the id, so the agent's output compares byte for byte — and so nothing
// says whether the id exists, let alone its size or hash. The controller's log and the
// requesting workspace's events tell the two apart, and recording the event either way keeps the
// work (and so the time taken) the same.
func (s *Server) unavailableArtifact(ctx context.Context, c *hub.Conn, op, id, owner string) *protocol.Error {
	why := "no such artifact"
	if owner != "" {
		why = "it belongs to workspace " + owner
		s.log.Warn("runner asked for another workspace's artifact", "op", op, "artifact", id, "owner", owner,
			"allocation", c.AllocationID, "workspace", c.WorkspaceID)
	} else {
		s.log.Info("runner asked for a missing artifact", "op", op, "artifact", clip(id, 80), "allocation", c.AllocationID, "workspace", c.WorkspaceID)
	}
	cause := fmt.Sprintf("%s of artifact %q refused: %s", op, clip(id, 80), why)
	if err := s.store.RecordEvent(context.WithoutCancel(ctx), c.WorkspaceID, cause); err != nil {
		s.log.Error("record refused artifact request", "workspace", c.WorkspaceID, "err", err)
	}
	return protocol.Errorf(protocol.CodeNotFound, "no such artifact is available to this workspace")
}

// clip shortens s to at most n bytes, for a runner-chosen string that goes into a record.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// authorizeArtifact checks a runner's right to an artifact: it exists, belongs to the runner's
// workspace, is not revoked, and the runner is the workspace's current allocation at its
// current writer epoch.
func (s *Server) authorizeArtifact(ctx context.Context, c *hub.Conn, id string, epoch uint64) (api.Artifact, error) {
	a, err := s.store.GetArtifact(ctx, id)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return a, s.unavailableArtifact(ctx, c, protocol.OpArtifactFetch, id, "")
	}
	if err != nil {
		return a, err
	}
	if a.WorkspaceID != c.WorkspaceID {
		return api.Artifact{}, s.unavailableArtifact(ctx, c, protocol.OpArtifactFetch, id, a.WorkspaceID)
	}
	if a.RevokedAt != nil {
		return a, protocol.Errorf(protocol.CodeRevoked, "artifact %q was revoked at %s", id, a.RevokedAt.Format(time.RFC3339))
	}
	ws, err := s.store.GetWorkspace(ctx, c.WorkspaceID)
	if err != nil {
		return a, err
	}
	if ws.AllocationID != c.AllocationID {
		return a, protocol.Errorf(protocol.CodeStaleEpoch, "allocation %s no longer serves workspace %s", c.AllocationID, ws.ID)
	}
	if epoch != ws.Epoch {
		return a, protocol.Errorf(protocol.CodeStaleEpoch, "epoch %d is not the current writer epoch %d of workspace %s", epoch, ws.Epoch, ws.ID)
	}
	return a, nil
}

// serveArtifactFetch answers artifact_fetch on st: a reply trailer, the body, a final trailer.
func (s *Server) serveArtifactFetch(c *hub.Conn, st *yamux.Stream, h protocol.Header) {
	ctx := s.ctx
	refuse := func(err error) { _ = protocol.WriteJSON(st, protocol.Trailer{Error: protocol.AsError(err)}) }
	var args protocol.ArtifactFetchArgs
	if err := json.Unmarshal(h.Args, &args); err != nil || args.ArtifactID == "" {
		refuse(protocol.Errorf(protocol.CodeInvalidArgument, "artifact_fetch needs an artifact_id"))
		return
	}
	a, err := s.authorizeArtifact(ctx, c, args.ArtifactID, h.Epoch)
	if err != nil {
		refuse(err)
		return
	}
	rc, _, err := s.blobs.Get(ctx, a.ObjectKey)
	if blob.IsNotFound(err) {
		s.log.Error("artifact object missing", "artifact", a.ID, "key", a.ObjectKey)
		refuse(protocol.Errorf(protocol.CodeDigestMismatch, "the stored bytes of artifact %q are missing", a.ID))
		return
	}
	if err != nil {
		refuse(err)
		return
	}
	defer rc.Close()
	info, err := json.Marshal(protocol.ArtifactInfo{ID: a.ID, Name: a.Name, Bytes: a.Bytes, SHA256: a.SHA256, Untrusted: true})
	if err != nil {
		refuse(err)
		return
	}
	// The body may take as long as it needs; each write has its own deadline instead.
	_ = st.SetDeadline(time.Time{})
	out := &deadlineWriter{st: st}
	if err := protocol.WriteJSON(out, protocol.Trailer{OK: true, Result: info}); err != nil {
		return
	}
	body := protocol.NewBodyWriter(out)
	sum, err := s.streamArtifact(ctx, a, rc, body)
	if err != nil {
		if protocol.CodeOf(err) == protocol.CodeDigestMismatch {
			s.log.Error("artifact bytes do not match the record", "artifact", a.ID, "key", a.ObjectKey, "err", err)
		}
		if body.Abort(err) == nil {
			_ = protocol.WriteJSON(out, protocol.Trailer{Error: protocol.AsError(err)})
		}
		return
	}
	if _, err := body.Finish(); err != nil {
		return
	}
	_ = protocol.WriteJSON(out, protocol.Trailer{OK: true, Bytes: a.Bytes, SHA256: sum})
}

// streamArtifact copies the stored object into body, never more bytes than the record says,
// hashing as it goes and re-reading the record every revokeCheckEvery bytes. It returns the
// SHA-256 sent, or the error to abort the body with.
func (s *Server) streamArtifact(ctx context.Context, a api.Artifact, r io.Reader, body io.Writer) (string, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var n, sinceCheck int64
	for {
		m, rerr := r.Read(buf)
		if m > 0 {
			if n+int64(m) > a.Bytes {
				return "", protocol.Errorf(protocol.CodeDigestMismatch, "artifact %q: the store holds more than the recorded %d bytes", a.ID, a.Bytes)
			}
			h.Write(buf[:m])
			if _, err := body.Write(buf[:m]); err != nil {
				return "", err
			}
			n += int64(m)
			sinceCheck += int64(m)
		}
		if sinceCheck >= revokeCheckEvery {
			sinceCheck = 0
			now, err := s.store.GetArtifact(ctx, a.ID)
			if err != nil {
				return "", err
			}
			if now.RevokedAt != nil {
				return "", protocol.Errorf(protocol.CodeRevoked, "artifact %q was revoked during the transfer", a.ID)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return "", fmt.Errorf("read artifact %s: %w", a.ID, rerr)
		}
	}
	got := hex.EncodeToString(h.Sum(nil))
	if n != a.Bytes || got != a.SHA256 {
		return "", protocol.Errorf(protocol.CodeDigestMismatch, "artifact %q: the store holds %d bytes with another SHA-256 than the record", a.ID, n)
	}
	// A revocation that landed after the last check still wins before the body is finished.
	if now, err := s.store.GetArtifact(ctx, a.ID); err != nil {
		return "", err
	} else if now.RevokedAt != nil {
		return "", protocol.Errorf(protocol.CodeRevoked, "artifact %q was revoked during the transfer", a.ID)
	}
	return got, nil
}

// deadlineWriter gives every write to a stream its own deadline.
type deadlineWriter struct{ st *yamux.Stream }

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.st.SetWriteDeadline(time.Now().Add(artifactWriteWait))
	return d.st.Write(p)
}

// artifactInstalled records a runner's install of one of its workspace's artifacts as a finished
// run, so `tether run ls` shows it with the artifact id, path, bytes and hash.
func (s *Server) artifactInstalled(c *hub.Conn, h protocol.Header) protocol.Trailer {
	var in protocol.ArtifactInstall
	if err := json.Unmarshal(h.Args, &in); err != nil || in.ArtifactID == "" || in.Path == "" {
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeInvalidArgument, "artifact_installed needs an artifact_id and a path")}
	}
	a, err := s.store.GetArtifact(s.ctx, in.ArtifactID)
	switch {
	case protocol.CodeOf(err) == protocol.CodeNotFound:
		return protocol.Trailer{Error: s.unavailableArtifact(s.ctx, c, protocol.OpArtifactInstalled, in.ArtifactID, "")}
	case err != nil:
		return protocol.Trailer{Error: protocol.AsError(err)}
	case a.WorkspaceID != c.WorkspaceID:
		return protocol.Trailer{Error: s.unavailableArtifact(s.ctx, c, protocol.OpArtifactInstalled, in.ArtifactID, a.WorkspaceID)}
	}
	at := in.InstalledAt.UTC()
	if at.IsZero() {
		at = s.now()
	}
	argv := []string{"artifact-install", in.ArtifactID, in.Path, fmt.Sprintf("bytes=%d", in.Bytes), "sha256=" + in.SHA256, "untrusted"}
	if in.Replayed {
		argv = append(argv, "replayed")
	}
	run := api.Run{ID: newID("run_"), WorkspaceID: c.WorkspaceID, AllocationID: c.AllocationID, Argv: argv,
		Epoch: h.Epoch, State: api.RunExited, StartedAt: at}
	if err := s.store.CreateRun(s.ctx, run); err != nil {
		return protocol.Trailer{Error: protocol.AsError(err)}
	}
	exit := 0
	if err := s.store.FinishRun(s.ctx, store.RunFinish{ID: run.ID, State: api.RunExited, ExitCode: &exit, At: at}); err != nil {
		return protocol.Trailer{Error: protocol.AsError(err)}
	}
	res, _ := json.Marshal(map[string]string{"run_id": run.ID})
	return protocol.Trailer{OK: true, Result: res}
}
