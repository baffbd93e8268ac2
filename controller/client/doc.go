// Package client is the Go client of the controller's REST API; the CLI is built on it.
package client
