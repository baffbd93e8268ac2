// Package api holds the REST API's resource types, shared by the server and its Go client.
package api
