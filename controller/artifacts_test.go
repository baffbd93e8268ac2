package controller

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// connectRunner records a workspace, connects its runner and returns the runner-side session.
func (tc *testController) connectRunner(t *testing.T, name string) (allocation, *yamux.Session, uint64) {
	t.Helper()
	al := tc.addAllocation(t, name)
	sess := tc.mustDial(t, al.token)
	w := welcome(t, hello(t, sess, goodHello(al.allocationID)))
	eventually(t, "runner registered", func() bool { _, ok := tc.s.hub.Get(al.allocationID); return ok })
	return al, sess, w.Epoch
}

type fetchResult struct {
	reply protocol.Trailer
	info  protocol.ArtifactInfo
	body  []byte
	err   error // the body's error
	final protocol.Trailer
}

// fetch opens artifact_fetch as a runner would. before, if set, runs after the reply trailer and
// before the body is read.
func fetch(t *testing.T, sess *yamux.Session, id string, epoch uint64, before func()) fetchResult {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(30 * time.Second))
	args, _ := json.Marshal(protocol.ArtifactFetchArgs{ArtifactID: id})
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpArtifactFetch, Epoch: epoch, Args: args}); err != nil {
		t.Fatal(err)
	}
	var r fetchResult
	if err := protocol.ReadJSON(st, &r.reply); err != nil {
		t.Fatalf("reply trailer: %v", err)
	}
	if !r.reply.OK {
		return r
	}
	if err := json.Unmarshal(r.reply.Result, &r.info); err != nil {
		t.Fatalf("artifact info: %v", err)
	}
	if before != nil {
		before()
	}
	r.body, r.err = io.ReadAll(protocol.NewBodyReader(st))
	if err := protocol.ReadJSON(st, &r.final); err != nil {
		t.Fatalf("final trailer: %v", err)
	}
	return r
}

func (tc *testController) putArtifact(t *testing.T, ws string, data []byte) api.Artifact {
	t.Helper()
	cl, err := client.New(tc.url, tc.s.operatorToken)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cl.PutArtifact(context.Background(), ws, "resp.json", bytes.NewReader(data))
	if err != nil {
		t.Fatalf("put artifact: %v", err)
	}
	return a
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func wantFetchRefused(t *testing.T, what string, r fetchResult, code protocol.Code) {
	t.Helper()
	if r.reply.OK || r.reply.Error == nil || r.reply.Error.Code != code {
		t.Fatalf("%s: reply %+v; want %s", what, r.reply, code)
	}
	if len(r.reply.Result) != 0 || r.reply.Bytes != 0 || r.reply.SHA256 != "" {
		t.Fatalf("%s: a refusal carries a result: %+v", what, r.reply)
	}
}

func TestArtifactREST(t *testing.T) {
	tc := newTestController(t)
	al := tc.addAllocation(t, "rest")
	data := []byte(`{"synthetic":"api response"}`)
	a := tc.putArtifact(t, al.workspaceID, data)
	if !strings.HasPrefix(a.ID, "art_") || a.WorkspaceID != al.workspaceID || a.Bytes != int64(len(data)) ||
		a.SHA256 != sha(data) || !a.Untrusted || a.ObjectKey != "artifacts/"+sha(data) || a.Name != "resp.json" {
		t.Fatalf("artifact: %+v", a)
	}
	cl, _ := client.New(tc.url, tc.s.operatorToken)
	ctx := context.Background()
	if got, err := cl.GetArtifact(ctx, a.ID); err != nil || got.ID != a.ID || !got.Untrusted {
		t.Fatalf("show: %+v, %v", got, err)
	}
	if list, err := cl.ListArtifacts(ctx, al.workspaceID); err != nil || len(list) != 1 || list[0].ID != a.ID {
		t.Fatalf("ls: %+v, %v", list, err)
	}
	r, err := cl.RevokeArtifact(ctx, a.ID)
	if err != nil || r.RevokedAt == nil {
		t.Fatalf("revoke: %+v, %v", r, err)
	}
	if _, err := cl.GetArtifact(ctx, "art_nope"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("missing artifact: %v", err)
	}
	if _, err := cl.PutArtifact(ctx, "ws_nope", "", bytes.NewReader(data)); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("put into a missing workspace: %v", err)
	}
}

func TestArtifactFetch(t *testing.T) {
	tc := newTestController(t)
	al, sess, epoch := tc.connectRunner(t, "fetcher")
	other := tc.addAllocation(t, "other")

	data := make([]byte, 5<<20+123) // spans more than one revocation check
	_, _ = rand.Read(data)
	own := tc.putArtifact(t, al.workspaceID, data)

	t.Run("own", func(t *testing.T) {
		r := fetch(t, sess, own.ID, epoch, nil)
		if r.err != nil || !bytes.Equal(r.body, data) || !r.final.OK || r.final.SHA256 != sha(data) {
			t.Fatalf("fetch: body %d bytes, err %v, final %+v", len(r.body), r.err, r.final)
		}
		if r.info.ID != own.ID || r.info.Bytes != int64(len(data)) || r.info.SHA256 != sha(data) || !r.info.Untrusted {
			t.Fatalf("info: %+v", r.info)
		}
	})
	t.Run("foreign", func(t *testing.T) {
		foreign := tc.putArtifact(t, other.workspaceID, []byte("another workspace's secret"))
		r := fetch(t, sess, foreign.ID, epoch, nil)
		wantFetchRefused(t, "foreign artifact", r, protocol.CodeNotFound)
		missing := fetch(t, sess, "art_0000000000000000", epoch, nil)
		wantFetchRefused(t, "missing artifact", missing, protocol.CodeNotFound)
		// One answer for both, byte for byte: not even the id differs.
		if *r.reply.Error != *missing.reply.Error || strings.Contains(r.reply.Error.Message, foreign.SHA256[:16]) {
			t.Fatalf("the foreign refusal differs from a missing one: %+v vs %+v", r.reply.Error, missing.reply.Error)
		}
		// The controller still tells them apart, in the requesting workspace's events.
		evs, err := tc.s.store.ListEvents(context.Background(), al.workspaceID)
		if err != nil {
			t.Fatal(err)
		}
		var causes []string
		for _, e := range evs {
			if strings.Contains(e.Cause, "artifact_fetch of artifact") {
				causes = append(causes, e.Cause)
			}
		}
		if len(causes) != 2 || !strings.Contains(causes[0], foreign.ID) || !strings.Contains(causes[0], other.workspaceID) ||
			!strings.Contains(causes[1], "art_0000000000000000") || !strings.Contains(causes[1], "no such artifact") {
			t.Fatalf("refusal events: %q", causes)
		}
	})
	t.Run("stale_epoch", func(t *testing.T) {
		wantFetchRefused(t, "stale epoch", fetch(t, sess, own.ID, epoch+1, nil), protocol.CodeStaleEpoch)
		if _, err := tc.s.store.BumpEpoch(context.Background(), al.workspaceID); err != nil {
			t.Fatal(err)
		}
		wantFetchRefused(t, "old epoch", fetch(t, sess, own.ID, epoch, nil), protocol.CodeStaleEpoch)
		epoch++
		if r := fetch(t, sess, own.ID, epoch, nil); r.err != nil {
			t.Fatalf("fetch at the new epoch: %v", r.err)
		}
	})
	t.Run("revoked_mid_transfer", func(t *testing.T) {
		a := tc.putArtifact(t, al.workspaceID, append([]byte("x"), data...))
		r := fetch(t, sess, a.ID, epoch, func() {
			if _, err := tc.s.store.RevokeArtifact(context.Background(), a.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
		})
		if protocol.CodeOf(r.err) != protocol.CodeRevoked || r.final.OK || r.final.Error == nil || r.final.Error.Code != protocol.CodeRevoked {
			t.Fatalf("revoked mid-transfer: body err %v, final %+v", r.err, r.final)
		}
		if len(r.body) >= len(data) {
			t.Fatalf("all %d bytes were sent after the revocation", len(r.body))
		}
		wantFetchRefused(t, "revoked", fetch(t, sess, a.ID, epoch, nil), protocol.CodeRevoked)
	})
	t.Run("tampered", func(t *testing.T) {
		small := []byte("the bytes the record describes")
		a := tc.putArtifact(t, al.workspaceID, small)
		path := filepath.Join(tc.s.cfg.DataDir, "blobs", filepath.FromSlash(a.ObjectKey))
		for _, evil := range [][]byte{[]byte("THE bytes the record describes"), []byte("short"), append(small, '!')} {
			if err := os.WriteFile(path, evil, 0o600); err != nil {
				t.Fatal(err)
			}
			r := fetch(t, sess, a.ID, epoch, nil)
			if !r.reply.OK || protocol.CodeOf(r.err) != protocol.CodeDigestMismatch || r.final.OK {
				t.Fatalf("tampered %q: reply %+v, body err %v, final %+v", evil, r.reply, r.err, r.final)
			}
		}
	})
}

func TestArtifactInstalledRecordsRun(t *testing.T) {
	tc := newTestController(t)
	al, sess, epoch := tc.connectRunner(t, "installer")
	a := tc.putArtifact(t, al.workspaceID, []byte("payload"))
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	args, _ := json.Marshal(protocol.ArtifactInstall{ArtifactID: a.ID, Path: "in/resp.json", Bytes: a.Bytes, SHA256: a.SHA256,
		Untrusted: true, InstalledAt: time.Now()})
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpArtifactInstalled, Epoch: epoch, Args: args}); err != nil {
		t.Fatal(err)
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil || !tr.OK {
		t.Fatalf("artifact_installed: %+v, %v", tr, err)
	}
	runs, err := tc.s.store.ListRuns(context.Background(), al.workspaceID)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %+v, %v", runs, err)
	}
	r := runs[0]
	want := []string{"artifact-install", a.ID, "in/resp.json", "bytes=7", "sha256=" + a.SHA256, "untrusted"}
	if strings.Join(r.Argv, " ") != strings.Join(want, " ") || r.State != api.RunExited || r.ExitCode == nil || *r.ExitCode != 0 || r.AllocationID != al.allocationID {
		t.Fatalf("install run: %+v", r)
	}
}
