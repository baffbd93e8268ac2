package api

// UpgradeTCP is the HTTP Upgrade token of a connection into a sandbox
// (GET /v1/workspaces/{id}/ports/{port}/connect, …/services/{name}/connect): the client sends
// Connection: Upgrade and Upgrade: tether-tcp; after the controller's 101 answer the connection
// carries the raw bytes of a TCP connection to that port inside the sandbox, both ways, and a
// half-close (FIN) either way is carried through. A refusal is an ordinary JSON error answer.
const UpgradeTCP = "tether-tcp"
