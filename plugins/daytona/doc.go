// Package daytona is the Daytona sandbox provider: each allocation is a
// Daytona sandbox, made and driven through Daytona's REST API with a small
// typed client (client.go). The runner binary is uploaded through the
// toolbox file API and started by a session command that alone carries the
// one-use bootstrap token in its environment; endpoints are Daytona preview
// links with their token header.
//
// The API key comes only from the environment (DAYTONA_API_KEY, or the
// variable named by the api_key_env option), never from the config, and is
// never logged.
//
// The provider owns only the sandboxes it made: they are named
// tether-<allocation> and carry the labels tether.provider=daytona,
// tether.allocation and tether.workspace. A sandbox under that name without
// them is refused with foreign.
//
// Stop is stop-and-retain: it disables auto-delete, confirms that with a
// fresh read (else retention_unconfirmed), and only then stops the
// sandbox; an archived sandbox counts as stopped. The path never starts or
// deletes the sandbox it retains.
package daytona
