// Package controller is Tether's control plane: it dispatches runners through provider plugins,
// holds their websocket connections, keeps the records and serves the REST API.
//
// This package is the workspace orchestration and the HTTP API: workspaces and their lifecycle
// (create, close, reopen, quiesce, delete), snapshot capture and restore, writer leases, runs
// and exec, files, services and artifacts, and the routes, auth and limits that serve them.
// What it builds on lives in subpackages, which never import it:
//
//   - hub: the runner connections and the operations run on them;
//   - providers: the provider plugins and their crash supervision;
//   - savedcopy: reading receipts' archives (verification, the saved-copy index, keys);
//   - project: projects, their base clones, checkout planning, inspection and base-clone gc;
//   - gitsource: the base clone's git; store, blob: the state and blob stores; api, client:
//     the REST API's types and its Go client.
package controller
