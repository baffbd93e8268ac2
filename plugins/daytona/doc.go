// Package daytona is the Daytona sandbox provider: each allocation is a
// Daytona sandbox, made and driven through Daytona's REST API with a small
// typed client derived from the published spec (client.go, toolbox.go;
// v0.205.1, daytona/clients d94a128, kept in testdata). The toolbox is
// reached at the sandbox's toolboxProxyUrl plus its id.
//
// The runner binary is uploaded to a temp name and renamed into place
// (Daytona's upload truncates in place). It is started by a session
// command that carries no secret: the one-use bootstrap token travels as a
// file in a private directory that the command's shell reads into the
// runner's environment and deletes, since Daytona logs command text.
// Endpoints are Daytona preview links with their token header.
//
// The API key comes only from the environment (DAYTONA_API_KEY, or the
// variable named by the api_key_env option), never from the config, and is
// never logged.
//
// The provider owns only the sandboxes it made: they are named
// tether-<allocation> and carry the labels tether.provider=daytona,
// tether.allocation and tether.workspace. A sandbox under that name without
// them is refused with foreign. A failed create is cleaned up by id, or,
// when its answer failed (Daytona may have made the sandbox anyway), by
// name and by labels over the paginated, eventually consistent list.
//
// Stop is stop-and-retain: it disables auto-delete and confirms that with
// a fresh read (else retention_unconfirmed), ends the runner's session
// (SIGTERM, then SIGKILL: Daytona's own stop SIGKILLs every process), stops
// the sandbox and confirms with a fresh read that it is stopped or
// archived. The path never starts or deletes the sandbox it retains.
// Calls answered 429 are retried after their Retry-After-* wait, and 409
// "state change in progress" with a backoff, both bounded.
package daytona
