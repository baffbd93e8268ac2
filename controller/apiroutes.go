package controller

import (
	"net/http"
	"reflect"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/openapi"
	"github.com/tetherhq/tether/protocol"
)

// The API spec's description of every route, keyed by the pattern it is registered with
// (routes and Handler). TestOpenAPIRoutes fails when a registered route has no entry here or an
// entry no route, and the integration test validates real traffic against what these say.

// withBody gives op a request body.
func withBody(op openapi.Op, body *openapi.Body) openapi.Op {
	op.Body = body
	return op
}

func jsonOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

func answer(status int, t reflect.Type) openapi.Response {
	return openapi.Response{Status: status, JSON: t}
}

func ok[T any]() openapi.Response      { return answer(http.StatusOK, jsonOf[T]()) }
func created[T any]() openapi.Response { return answer(http.StatusCreated, jsonOf[T]()) }

func jsonBody[T any](required bool) *openapi.Body {
	return &openapi.Body{JSON: jsonOf[T](), Required: required}
}

var (
	noContent = openapi.Response{Status: http.StatusNoContent}
	// switched is a websocket's (or a tether-tcp connection's) handshake answer.
	switched = openapi.Response{Status: http.StatusSwitchingProtocols,
		Description: "Switching Protocols: the connection now carries the upgraded protocol"}
	// proxied is whatever a service answers through a proxy; the controller's own refusals
	// (before anything reaches the service) are typed JSON errors as everywhere.
	proxied = openapi.Response{Status: openapi.Default, Media: []string{"*/*"},
		Description: "the service's own answer, any status; the controller's refusals are typed JSON errors"}
	epochHeader = openapi.Param{Name: HeaderEpoch, Type: "integer",
		Description: "the lease epoch this write runs under (required while a lease is held; see the lease routes)"}
	wsParam    = []openapi.Param{{Name: "id", Description: "workspace id or name"}}
	wakeHeader = openapi.Param{Name: HeaderWake, Type: "boolean",
		Description: "true: a stopped workspace is started, a closed one reopened, before the call (else such a call is refused conflict, saying how to wake it; a file read then answers from the saved copy). A workspace still stopping or closing answers unavailable, which clients retry. tether serve --wake-on-use does this for every call"}
)

// redirect is http.Redirect's answer: 307 (method and body kept), a small HTML body for GET.
func redirect(desc string) openapi.Response {
	return openapi.Response{Status: http.StatusTemporaryRedirect, Description: desc, Media: []string{"text/html"},
		Headers: []openapi.Param{{Name: "Location", Required: true}}}
}

func boolQuery(name, desc string) openapi.Param {
	return openapi.Param{Name: name, Type: "boolean", Description: desc}
}

func strQuery(name, desc string) openapi.Param {
	return openapi.Param{Name: name, Description: desc}
}

func intQuery(name, desc string) openapi.Param {
	return openapi.Param{Name: name, Type: "integer", Description: desc}
}

// apiOps describes every route the controller serves.
func apiOps() []openapi.Op {
	var ops []openapi.Op
	ops = append(ops, frontOps()...)
	ops = append(ops, workspaceOps()...)
	ops = append(ops, fileOps()...)
	ops = append(ops, runOps()...)
	ops = append(ops, snapshotOps()...)
	ops = append(ops, serviceOps()...)
	ops = append(ops, otherOps()...)
	// Every route that uses a workspace takes the wake header (activity.go's useRoutes).
	for i := range ops {
		if _, ok := useRoutes[ops[i].Pattern]; ok {
			ops[i].Headers = append(ops[i].Headers, wakeHeader)
		}
	}
	return ops
}

// frontOps are the routes outside the operator API: health, the spec, runners, peers, previews.
func frontOps() []openapi.Op {
	peerHeader := openapi.Param{Name: "X-Tether-Peer", Required: true, Description: "the calling controller's id"}
	internal := func(pattern, id, summary string, res openapi.Response) openapi.Op {
		return openapi.Op{Pattern: pattern, ID: id, Tag: "internal", Summary: summary, Auth: "peer",
			PathParams: []openapi.Param{{Name: "id", Description: "allocation id"}},
			Headers:    []openapi.Param{peerHeader}, Responses: []openapi.Response{res}}
	}
	return []openapi.Op{
		{Pattern: "GET /healthz", ID: "health", Tag: "meta", Auth: openapi.None,
			Summary:     "Whether this controller can serve",
			Description: "200 while the controller writes its cluster heartbeat; 503 when it could not within the lapse (it then holds no runner), so a load balancer takes it out of rotation.",
			Responses: []openapi.Response{ok[health](),
				{Status: http.StatusServiceUnavailable, JSON: jsonOf[health](), Description: "no heartbeat written within the lapse"}},
			NoErrors: true},
		{Pattern: "GET /v1/openapi.json", ID: "openapi", Tag: "meta", Auth: openapi.None,
			Summary:     "This document",
			Description: "Served without a credential: it is the same for every controller of a version and names no workspace.",
			Responses:   []openapi.Response{{Status: http.StatusOK, Media: []string{"application/json"}}}, NoErrors: true},
		{Pattern: "GET /v1/runners/connect", ID: "runnerConnect", Tag: "internal", Auth: "runner",
			Summary:     "A runner's websocket",
			Description: "The runner of an allocation dials here with its session token; the websocket then carries a yamux session of runner operations. Not for clients.",
			Responses:   []openapi.Response{switched}},
		internal("GET /internal/v1/allocations/{id}/tunnel", "peerTunnel", "A tunnel to a runner this controller holds (websocket carrying yamux)", switched),
		internal("POST /internal/v1/allocations/{id}/evict", "peerEvict", "Give up a runner connection another controller takes over", noContent),
		internal("POST /internal/v1/allocations/{id}/disconnect", "peerDisconnect", "Close a runner connection", noContent),
		internal("POST /internal/v1/allocations/{id}/stop", "peerStop", "Stop a host-local sandbox this controller placed", noContent),
		internal("POST /internal/v1/allocations/{id}/destroy", "peerDestroy", "Destroy a host-local sandbox this controller placed", noContent),
		internal("POST /internal/v1/allocations/{id}/stop-keep", "peerStopKeep", "Stop a host-local sandbox this controller placed and confirm it is kept", noContent),
		withBody(internal("POST /internal/v1/allocations/{id}/start", "peerStart", "Start a kept host-local sandbox this controller placed", noContent),
			jsonBody[startRequest](true)),
		{Pattern: "/p/{token}/{path...}", ID: "preview", Tag: "previews", Auth: openapi.None,
			Summary:     "A preview link: the service's HTTP, any method",
			Description: "The link's token is the credential; the request is proxied to the service inside the sandbox and the answer is the service's own.",
			PathParams:  []openapi.Param{{Name: "token", Description: "the preview link's secret"}, {Name: "path", Description: "the path inside the service"}},
			Responses:   []openapi.Response{proxied}, NoErrors: true},
		{Pattern: "/p/{token}", ID: "previewBare", Tag: "previews", Auth: openapi.None,
			Summary:    "Redirects to /p/{token}/",
			PathParams: []openapi.Param{{Name: "token", Description: "the preview link's secret"}},
			Responses:  []openapi.Response{redirect("to the link with a trailing slash")}, NoErrors: true},
		{Pattern: "GET /metrics", ID: "metrics", Tag: "meta",
			Summary:     "Prometheus metrics",
			Description: "The controller's metrics in the Prometheus text format. Needs the operator token or an API token not limited to workspaces (the metrics span every workspace); `tether serve --metrics-listen ADDR` also serves them without a token on a listener of their own.",
			Responses:   []openapi.Response{{Status: http.StatusOK, Media: []string{"text/plain"}}}},
		{Pattern: "/ui", ID: "consoleBare", Tag: "console", Auth: openapi.None,
			Summary:   "Redirects to /ui/",
			Responses: []openapi.Response{redirect("to the console with a trailing slash")}, NoErrors: true},
		{Pattern: "/ui/", ID: "console", Tag: "console", Auth: openapi.None,
			Summary:     "The web console",
			Description: "The console's embedded page and its sign-in: POST /ui/session trades a token (JSON) for an HttpOnly, SameSite=Strict session cookie and a secret the page sends as X-Tether-CSRF on every /v1 call it makes; DELETE /ui/session signs out. Not a REST API: described here so every registered route is.",
			Responses:   []openapi.Response{{Status: http.StatusOK, Media: []string{"text/html", "text/javascript", "text/css", "application/json"}}}},
	}
}

// health is the body of /healthz.
type health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	ID      string `json:"id"`
}

func workspaceOps() []openapi.Op {
	ws := func(pattern, id, summary string, o openapi.Op) openapi.Op {
		o.Pattern, o.ID, o.Summary, o.Tag = pattern, id, summary, "workspaces"
		if o.PathParams == nil {
			o.PathParams = wsParam
		}
		return o
	}
	return []openapi.Op{
		{Pattern: "GET /v1/providers", ID: "listProviders", Tag: "providers", Summary: "The provider plugins found next to the controller",
			Responses: []openapi.Response{ok[[]api.ProviderInfo]()}},
		{Pattern: "POST /v1/workspaces", ID: "createWorkspace", Tag: "workspaces", Summary: "Create a workspace (answers once its runner is connected)",
			Body: jsonBody[api.CreateWorkspaceRequest](false), Responses: []openapi.Response{created[api.Workspace]()}},
		{Pattern: "GET /v1/workspaces", ID: "listWorkspaces", Tag: "workspaces", Summary: "List workspaces (open ones unless all=true)",
			Query: []openapi.Param{boolQuery("all", "include deleted workspaces")}, Responses: []openapi.Response{ok[[]api.Workspace]()}},
		ws("GET /v1/workspaces/{id}", "getWorkspace", "Show a workspace", openapi.Op{Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("PATCH /v1/workspaces/{id}", "updateWorkspace", "Change a workspace's settings", openapi.Op{
			Body: jsonBody[api.UpdateWorkspaceRequest](true), Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("POST /v1/workspaces/{id}/fork", "forkWorkspace", "Fork a workspace into new ones from one receipt", openapi.Op{
			Body: jsonBody[api.ForkRequest](false), Responses: []openapi.Response{created[api.ForkResult]()}}),
		ws("DELETE /v1/workspaces/{id}", "deleteWorkspace", "Delete a closed workspace (purge=true removes its receipts too)", openapi.Op{
			Query: []openapi.Param{boolQuery("purge", "also remove its snapshot receipts")},
			Responses: []openapi.Response{{Status: http.StatusOK, OneOf: []reflect.Type{jsonOf[api.Workspace](), jsonOf[api.PurgeResult]()},
				Description: "the deleted workspace; with purge=true, a PurgeResult"}}}),
		ws("PUT /v1/workspaces/{id}/tree", "importTree", "Import a tar into the workspace", openapi.Op{
			Query: []openapi.Param{strQuery("dir", "workspace-relative directory to import into")}, Headers: []openapi.Param{epochHeader},
			Body: &openapi.Body{Media: "application/x-tar", Required: true}, Responses: []openapi.Response{ok[api.TreeImportResult]()}}),
		ws("GET /v1/workspaces/{id}/tree", "exportTree", "A tar of one path of a live workspace", openapi.Op{
			Query: []openapi.Param{strQuery("path", "workspace-relative path (default the root)"), strQuery("name", "the top entry's name in the tar")},
			Responses: []openapi.Response{{Status: http.StatusOK, Media: []string{"application/x-tar"},
				Description: "the tar; trailers X-Tether-Entries and X-Tether-Skipped come only after a whole, checked tar",
				Headers:     []openapi.Param{{Name: HeaderType, Description: "file, dir or symlink"}}}}}),
		ws("GET /v1/workspaces/{id}/watch", "watch", "Stream file changes as NDJSON", openapi.Op{
			Query: []openapi.Param{strQuery("path", "workspace-relative directory (default the root)"), boolQuery("recursive", "watch the whole subtree")},
			Responses: []openapi.Response{{Status: http.StatusOK, Media: []string{ContentTypeNDJSON},
				Description: "one JSON event a line until the client goes or the watch ends",
				Headers:     []openapi.Param{{Name: HeaderWatches, Type: "integer", Description: "directories watched"}}}}}),
		ws("GET /v1/workspaces/{id}/runs", "listRuns", "A workspace's runs", openapi.Op{Responses: []openapi.Response{ok[[]api.Run]()}}),
		ws("POST /v1/workspaces/{id}/close", "closeWorkspace", "Close: quiesce, capture, release (check=true only reports)", openapi.Op{
			Body: jsonBody[api.CloseRequest](false),
			Responses: []openapi.Response{{Status: http.StatusOK, OneOf: []reflect.Type{jsonOf[api.CloseResult](), jsonOf[api.CloseCheck]()},
				Description: "a CloseResult; with check, a CloseCheck"}}}),
		ws("POST /v1/workspaces/{id}/export", "exportWorkspace", "Copy the workspace into a directory of the controller's host", openapi.Op{
			Body: jsonBody[api.ExportRequest](true), Responses: []openapi.Response{ok[api.ExportResult]()}}),
		ws("POST /v1/workspaces/{id}/reopen", "reopenWorkspace", "Reopen a closed workspace from its saved copy", openapi.Op{
			Body: jsonBody[api.ReopenRequest](false), Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("POST /v1/workspaces/{id}/recover", "recoverWorkspace", "Rebuild a lost workspace on a fresh allocation from one of its receipts", openapi.Op{
			Body: jsonBody[api.RecoverRequest](false), Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("POST /v1/workspaces/{id}/stop", "stopWorkspace", "Stop the sandbox and keep it, unsaved work included (no capture, no release)", openapi.Op{
			Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("POST /v1/workspaces/{id}/start", "startWorkspace", "Start a stopped workspace's kept sandbox under a new writer epoch", openapi.Op{
			Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("GET /v1/workspaces/{id}/events", "listEvents", "A workspace's state transitions", openapi.Op{Responses: []openapi.Response{ok[[]api.Event]()}}),
		ws("GET /v1/workspaces/{id}/inspect", "inspectWorkspace", "A project workspace's Git state and delivery", openapi.Op{Responses: []openapi.Response{ok[api.Inspection]()}}),
		ws("POST /v1/workspaces/{id}/reconcile", "reconcileWorkspace", "Fast-forward a project workspace to its base", openapi.Op{
			Headers: []openapi.Param{epochHeader}, Responses: []openapi.Response{ok[api.ReconcileResult]()}}),
		ws("POST /v1/workspaces/{id}/source", "setSource", "Record the host directory the workspace was made from", openapi.Op{
			Body: jsonBody[api.SourceRequest](true), Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("POST /v1/workspaces/{id}/pull", "pullPlan", "What the workspace changed since its base", openapi.Op{
			Body: jsonBody[api.PullRequest](false), Responses: []openapi.Response{ok[api.PullPlan]()}}),
		ws("POST /v1/workspaces/{id}/pulled", "pulled", "Record that a pull brought a snapshot back whole", openapi.Op{
			Body: jsonBody[api.PulledRequest](true), Responses: []openapi.Response{ok[api.Workspace]()}}),
		ws("GET /v1/workspaces/{id}/git/pack", "gitPack", "A Git pack of a project workspace's branch", openapi.Op{
			Query: []openapi.Param{strQuery("want", "the commit wanted"), {Name: "have", Repeated: true, Description: "commits the receiver has"}},
			Responses: []openapi.Response{{Status: http.StatusOK, Media: []string{"application/x-git-packfile"},
				Description: "the pack; trailer X-Tether-Entries counts its objects"}}}),
		ws("POST /v1/workspaces/{id}/lease", "acquireLease", "Acquire the workspace's write lease", openapi.Op{
			Body: jsonBody[api.LeaseRequest](true), Responses: []openapi.Response{created[api.Lease]()}}),
		ws("PUT /v1/workspaces/{id}/lease", "renewLease", "Renew the lease", openapi.Op{
			Body: jsonBody[api.LeaseRequest](true), Responses: []openapi.Response{ok[api.Lease]()}}),
		ws("DELETE /v1/workspaces/{id}/lease", "releaseLease", "Release the lease", openapi.Op{
			Query: []openapi.Param{{Name: "epoch", Type: "integer", Required: true, Description: "the lease's epoch"}}, Responses: []openapi.Response{noContent}}),
		ws("GET /v1/workspaces/{id}/lease", "showLease", "The lease held on the workspace (not_found when none)", openapi.Op{Responses: []openapi.Response{ok[api.Lease]()}}),
	}
}

func fileOps() []openapi.Op {
	const files = "/v1/workspaces/{id}/files/{path...}"
	params := []openapi.Param{wsParam[0], {Name: "path", Description: "workspace-relative path, escaped as one segment (a/b is a%2Fb); empty for the root"}}
	src := []openapi.Param{
		{Name: HeaderSource, Description: "live (the runner) or saved (the last receipt)"},
		{Name: HeaderAllocation, Description: "live: the allocation read"},
		{Name: HeaderSnapshot, Description: "saved: the receipt read"},
		{Name: HeaderSavedAt, Description: "saved: when that receipt was written (RFC 3339)"},
	}
	read := append([]openapi.Param{{Name: HeaderSize, Type: "integer", Description: "the file's full size"},
		{Name: "Last-Modified"}, {Name: "Accept-Ranges"}}, src...)
	return []openapi.Op{
		{Pattern: "GET " + files, ID: "readFile", Tag: "files", PathParams: params,
			Summary:     "Read a file, stat it (?stat) or list a directory (?list)",
			Description: "Live while the workspace has a connected runner, else from its last receipt (the X-Tether-Source headers say which). A whole-file read ends with the trailer X-Tether-Sha256; a read cut off mid-way is never ended cleanly.",
			Query: []openapi.Param{strQuery("list", "present: list the directory (FsListResult)"), strQuery("stat", "present: stat the path (FileInfo)"),
				strQuery("cursor", "list: where the previous page ended"), intQuery("limit", "list: entries per page")},
			Headers: []openapi.Param{{Name: "Range", Description: "one bytes= range"}},
			Responses: []openapi.Response{
				{Status: http.StatusOK, OneOf: []reflect.Type{jsonOf[protocol.FsListResult](), jsonOf[protocol.FileInfo]()},
					Media: []string{"application/octet-stream"}, Headers: read,
					Description: "list and stat answer JSON; a read answers the bytes"},
				{Status: http.StatusPartialContent, Media: []string{"application/octet-stream"}, Description: "the range asked for",
					Headers: append([]openapi.Param{{Name: "Content-Range", Required: true}}, read...)}}},
		{Pattern: "PUT " + files, ID: "writeFile", Tag: "files", PathParams: params, Summary: "Write a file (atomically)",
			Query: []openapi.Param{boolQuery("replace", "replace an existing file"), strQuery("if_sha256", "write only if the file now has this SHA-256"),
				strQuery("mode", "octal permission bits (0644)")},
			Headers: []openapi.Param{epochHeader, {Name: HeaderSHA256, Description: "the content's expected SHA-256, checked before the file is published; a client that hashes as it sends declares it in the Trailer header instead and sends it as a trailer after a chunked body"}},
			Body:    &openapi.Body{Media: "application/octet-stream", Required: true}, Responses: []openapi.Response{created[protocol.FsWriteResult]()}},
		{Pattern: "DELETE " + files, ID: "removeFile", Tag: "files", PathParams: params, Summary: "Remove a file or (recursive=true) a directory",
			Query: []openapi.Param{boolQuery("recursive", "remove a directory and everything in it")}, Headers: []openapi.Param{epochHeader},
			Responses: []openapi.Response{noContent}},
		{Pattern: "POST " + files, ID: "fileOp", Tag: "files", PathParams: params, Summary: "mkdir, rename or chmod (op=…)",
			Query: []openapi.Param{{Name: "op", Required: true, Description: "mkdir, rename or chmod"}, boolQuery("parents", "mkdir: make missing parents"),
				strQuery("mode", "mkdir, chmod: octal permission bits"), strQuery("to", "rename: the new path"), boolQuery("replace", "rename: replace the target")},
			Headers: []openapi.Param{epochHeader}, Responses: []openapi.Response{ok[protocol.FileInfo]()}},
		{Pattern: "POST /v1/workspaces/{id}/uploads", ID: "createUpload", Tag: "files", PathParams: wsParam, Summary: "Start a resumable upload",
			Headers: []openapi.Param{epochHeader}, Body: jsonBody[api.UploadCreate](true), Responses: []openapi.Response{created[api.Upload]()}},
		{Pattern: "GET /v1/workspaces/{id}/uploads", ID: "listUploads", Tag: "files", PathParams: wsParam, Summary: "A workspace's upload sessions",
			Query:     []openapi.Param{strQuery("path", "only those to this path"), strQuery("sha256", "only live ones of this content")},
			Responses: []openapi.Response{ok[api.UploadList]()}},
		{Pattern: "GET /v1/workspaces/{id}/uploads/{upload}", ID: "getUpload", Tag: "files", Summary: "An upload session (its offset is where the next chunk goes)",
			PathParams: []openapi.Param{wsParam[0], {Name: "upload", Description: "upload id"}}, Responses: []openapi.Response{ok[api.Upload]()}},
		{Pattern: "PUT /v1/workspaces/{id}/uploads/{upload}", ID: "uploadChunk", Tag: "files", Summary: "Send a chunk at offset",
			PathParams: []openapi.Param{wsParam[0], {Name: "upload", Description: "upload id"}},
			Query:      []openapi.Param{{Name: "offset", Type: "integer", Required: true, Description: "where the chunk starts"}},
			Headers:    []openapi.Param{epochHeader}, Body: &openapi.Body{Media: "application/octet-stream", Required: true},
			Responses: []openapi.Response{ok[api.Upload](), {Status: http.StatusCreated, JSON: jsonOf[api.Upload](),
				Description: "the chunk completed the file, which is published"}}},
		{Pattern: "DELETE /v1/workspaces/{id}/uploads/{upload}", ID: "abortUpload", Tag: "files", Summary: "Abort an upload",
			PathParams: []openapi.Param{wsParam[0], {Name: "upload", Description: "upload id"}}, Responses: []openapi.Response{noContent}},
	}
}

func runOps() []openapi.Op {
	run := []openapi.Param{{Name: "id", Description: "run id"}}
	return []openapi.Op{
		{Pattern: "GET /v1/workspaces/{id}/exec", ID: "exec", Tag: "runs", PathParams: wsParam, Summary: "Run a command (websocket)",
			Description: "A websocket: the client's first message is the command (argv, env, cwd, tty, detach, idempotency key), then stdin and resize frames; the controller sends the run's start, its output frames and its exit.",
			Headers:     []openapi.Param{epochHeader}, Responses: []openapi.Response{switched}},
		{Pattern: "GET /v1/runs/{id}", ID: "getRun", Tag: "runs", PathParams: run, Summary: "Show a run", Responses: []openapi.Response{ok[api.Run]()}},
		{Pattern: "GET /v1/runs/{id}/logs", ID: "runLogs", Tag: "runs", PathParams: run, Summary: "A run's log as channel frames",
			Query: []openapi.Param{intQuery("stdout_offset", "byte offset into stdout"), intQuery("stderr_offset", "byte offset into stderr"),
				strQuery("stream", "stdout or stderr only"), boolQuery("follow", "keep streaming until the run ends")},
			Responses: []openapi.Response{{Status: http.StatusOK, Media: []string{ContentTypeFrames},
				Description: "frames: stdout/stderr data, gaps, and the log's end last (or one error frame)"}}},
		{Pattern: "GET /v1/runs/{id}/attach", ID: "attachRun", Tag: "runs", PathParams: run, Summary: "Reattach to a run (websocket, like exec)",
			Headers: []openapi.Param{epochHeader}, Responses: []openapi.Response{switched}},
		{Pattern: "POST /v1/runs/{id}/signal", ID: "signalRun", Tag: "runs", PathParams: run, Summary: "Signal a running command",
			Headers: []openapi.Param{epochHeader}, Body: jsonBody[api.RunSignalRequest](true), Responses: []openapi.Response{ok[api.Run]()}},
		{Pattern: "POST /v1/runs/{id}/wait", ID: "waitRun", Tag: "runs", PathParams: run, Summary: "Wait for a run to end", Responses: []openapi.Response{ok[api.Run]()}},
	}
}

func snapshotOps() []openapi.Op {
	snap := []openapi.Param{{Name: "id", Description: "snapshot id"}}
	return []openapi.Op{
		{Pattern: "POST /v1/workspaces/{id}/snapshots", ID: "createSnapshot", Tag: "snapshots", PathParams: wsParam, Summary: "Capture the workspace",
			Query: []openapi.Param{boolQuery("full", "store every file again instead of an increment")}, Responses: []openapi.Response{created[api.Snapshot]()}},
		{Pattern: "GET /v1/workspaces/{id}/snapshots", ID: "listSnapshots", Tag: "snapshots", PathParams: wsParam, Summary: "A workspace's receipts",
			Responses: []openapi.Response{ok[[]api.Snapshot]()}},
		{Pattern: "POST /v1/workspaces/{id}/snapshots/prune", ID: "pruneSnapshots", Tag: "snapshots", PathParams: wsParam, Summary: "Apply a retention policy",
			Body: jsonBody[api.PruneRequest](false), Responses: []openapi.Response{ok[api.PruneResult]()}},
		{Pattern: "GET /v1/snapshots/{id}", ID: "getSnapshot", Tag: "snapshots", PathParams: snap, Summary: "Show a receipt", Responses: []openapi.Response{ok[api.Snapshot]()}},
		{Pattern: "DELETE /v1/snapshots/{id}", ID: "removeSnapshot", Tag: "snapshots", PathParams: snap, Summary: "Remove a receipt (gc frees its objects)",
			Responses: []openapi.Response{ok[api.Snapshot]()}},
		{Pattern: "POST /v1/snapshots/{id}/restore", ID: "restoreSnapshot", Tag: "snapshots", PathParams: snap, Summary: "Restore a receipt into a new workspace",
			Body: jsonBody[api.RestoreRequest](false), Responses: []openapi.Response{created[api.RestoreResult]()}},
		{Pattern: "GET /v1/snapshots/{id}/archive", ID: "snapshotArchive", Tag: "snapshots", PathParams: snap, Summary: "The stored archive (tar.zst)",
			Responses: []openapi.Response{{Status: http.StatusOK, Media: []string{"application/zstd"},
				Headers: []openapi.Param{{Name: "Content-Disposition"}}}}},
		{Pattern: "POST /v1/snapshots/{id}/verify", ID: "verifySnapshot", Tag: "snapshots", PathParams: snap, Summary: "Read the stored object back and check it",
			Responses: []openapi.Response{ok[api.VerifyResult]()}},
		{Pattern: "POST /v1/snapshots/{id}/files", ID: "snapshotFiles", Tag: "snapshots", PathParams: snap, Summary: "A tar of some regular files of a receipt",
			Body: jsonBody[api.FilesRequest](true),
			Responses: []openapi.Response{{Status: http.StatusOK, Media: []string{"application/x-tar"},
				Description: "the tar; trailer X-Tether-Entries only after all of it"}}},
	}
}

func serviceOps() []openapi.Op {
	svc := []openapi.Param{wsParam[0], {Name: "name", Description: "service name"}}
	proxy := "/v1/workspaces/{id}/services/{name}/proxy"
	return []openapi.Op{
		{Pattern: "POST /v1/workspaces/{id}/services", ID: "startService", Tag: "services", PathParams: wsParam, Summary: "Start a supervised service",
			Headers: []openapi.Param{epochHeader}, Body: jsonBody[protocol.ServiceSpec](true), Responses: []openapi.Response{created[api.Service]()}},
		{Pattern: "GET /v1/workspaces/{id}/services", ID: "listServices", Tag: "services", PathParams: wsParam, Summary: "A workspace's services",
			Responses: []openapi.Response{ok[[]api.Service]()}},
		{Pattern: "GET /v1/workspaces/{id}/services/{name}/logs", ID: "serviceLogs", Tag: "services", PathParams: svc, Summary: "A service's log bytes",
			Query: []openapi.Param{intQuery("offset", "byte offset to start at"), boolQuery("follow", "keep streaming until the service stops")},
			Responses: []openapi.Response{{Status: http.StatusOK, Media: []string{"application/octet-stream"},
				Description: "the bytes; trailers X-Tether-Log-End and X-Tether-Log-Overrun",
				Headers:     []openapi.Param{{Name: HeaderLogOffset, Type: "integer", Required: true, Description: "where the bytes start"}}}}},
		{Pattern: "GET /v1/workspaces/{id}/services/{name}/endpoint", ID: "serviceEndpoint", Tag: "services", PathParams: svc, Summary: "Where a ready service is reached",
			Responses: []openapi.Response{ok[api.ServiceEndpoint]()}},
		{Pattern: "POST /v1/workspaces/{id}/services/{name}/stop", ID: "stopService", Tag: "services", PathParams: svc, Summary: "Stop a service",
			Query: []openapi.Param{strQuery("grace", "how long to wait after SIGTERM (a duration)")}, Headers: []openapi.Param{epochHeader},
			Responses: []openapi.Response{ok[api.Service]()}},
		{Pattern: "GET /v1/workspaces/{id}/services/{name}/connect", ID: "connectService", Tag: "services", PathParams: svc,
			Summary:     "A raw TCP connection to the service's port (Upgrade: tether-tcp)",
			Description: "Send Connection: Upgrade and Upgrade: " + api.UpgradeTCP + "; after 101 the connection carries the TCP bytes both ways, half-closes included.",
			Responses:   []openapi.Response{switched}},
		{Pattern: "GET /v1/workspaces/{id}/ports/{port}/connect", ID: "connectPort", Tag: "services",
			PathParams: []openapi.Param{wsParam[0], {Name: "port", Type: "integer", Description: "a port the operator allows (tether serve --forward-ports) or a service's"}},
			Summary:    "A raw TCP connection to a port in the sandbox (Upgrade: tether-tcp)", Responses: []openapi.Response{switched}},
		{Pattern: proxy + "/{path...}", ID: "serviceProxy", Tag: "services",
			PathParams: []openapi.Param{svc[0], svc[1], {Name: "path", Description: "the path inside the service"}},
			Summary:    "The service's HTTP through the controller, any method",
			Responses:  []openapi.Response{proxied}, NoErrors: true},
		{Pattern: proxy, ID: "serviceProxyBare", Tag: "services", PathParams: svc, Summary: "Redirects to …/proxy/",
			Responses: []openapi.Response{redirect("to the proxy's root")}},
		{Pattern: "POST /v1/workspaces/{id}/services/{name}/previews", ID: "createPreview", Tag: "previews", PathParams: svc,
			Summary: "Make a preview link (its URL is shown once)", Body: jsonBody[api.PreviewRequest](false), Responses: []openapi.Response{created[api.Preview]()}},
		{Pattern: "GET /v1/workspaces/{id}/services/{name}/previews", ID: "listPreviews", Tag: "previews", PathParams: svc, Summary: "A service's preview links",
			Responses: []openapi.Response{ok[[]api.Preview]()}},
		{Pattern: "DELETE /v1/workspaces/{id}/services/{name}/previews", ID: "revokePreviews", Tag: "previews", PathParams: svc, Summary: "Revoke a service's preview links",
			Responses: []openapi.Response{ok[api.PreviewsRevoked]()}},
	}
}

func otherOps() []openapi.Op {
	art := []openapi.Param{{Name: "id", Description: "artifact id"}}
	return []openapi.Op{
		{Pattern: "POST /v1/workspaces/{id}/artifacts", ID: "putArtifact", Tag: "artifacts", PathParams: wsParam, Summary: "Store bytes as an artifact",
			Query: []openapi.Param{strQuery("name", "a name for it")}, Body: &openapi.Body{Media: "application/octet-stream", Required: true},
			Responses: []openapi.Response{created[api.Artifact]()}},
		{Pattern: "GET /v1/workspaces/{id}/artifacts", ID: "listArtifacts", Tag: "artifacts", PathParams: wsParam, Summary: "A workspace's artifacts",
			Responses: []openapi.Response{ok[[]api.Artifact]()}},
		{Pattern: "GET /v1/artifacts/{id}", ID: "getArtifact", Tag: "artifacts", PathParams: art, Summary: "Show an artifact", Responses: []openapi.Response{ok[api.Artifact]()}},
		{Pattern: "POST /v1/artifacts/{id}/revoke", ID: "revokeArtifact", Tag: "artifacts", PathParams: art, Summary: "Revoke an artifact",
			Responses: []openapi.Response{ok[api.Artifact]()}},
		{Pattern: "POST /v1/projects", ID: "createProject", Tag: "projects", Summary: "Register a Git source as a project",
			Body: jsonBody[api.CreateProjectRequest](true), Responses: []openapi.Response{created[api.Project]()}},
		{Pattern: "GET /v1/projects", ID: "listProjects", Tag: "projects", Summary: "List projects", Responses: []openapi.Response{ok[[]api.Project]()}},
		{Pattern: "GET /v1/projects/{id}", ID: "getProject", Tag: "projects", PathParams: []openapi.Param{{Name: "id", Description: "project id or name"}},
			Summary: "Show a project", Responses: []openapi.Response{ok[api.Project]()}},
		{Pattern: "POST /v1/gc", ID: "gc", Tag: "storage", Summary: "Reclaim closed workspaces and unneeded snapshot objects",
			Body: jsonBody[api.GCRequest](false), Responses: []openapi.Response{ok[api.GCResult]()}},
		{Pattern: "GET /v1/storage", ID: "storage", Tag: "storage", Summary: "Stored snapshot objects by who needs them", Responses: []openapi.Response{ok[api.StorageUsage]()}},
		{Pattern: "POST /v1/tokens", ID: "createToken", Tag: "tokens", Summary: "Create an API token (its secret is shown once)",
			Body: jsonBody[api.CreateTokenRequest](true), Responses: []openapi.Response{created[api.Token]()}},
		{Pattern: "GET /v1/tokens", ID: "listTokens", Tag: "tokens", Summary: "List API tokens", Responses: []openapi.Response{ok[[]api.Token]()}},
		{Pattern: "DELETE /v1/tokens/{name}", ID: "revokeToken", Tag: "tokens", PathParams: []openapi.Param{{Name: "name", Description: "token name"}},
			Summary: "Revoke an API token", Responses: []openapi.Response{noContent}},
	}
}
