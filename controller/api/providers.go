package api

import "encoding/json"

// ProviderInfo describes one provider plugin found next to the controller (GET /v1/providers).
type ProviderInfo struct {
	Name         string   `json:"name"`
	Path         string   `json:"path"`
	Version      string   `json:"version,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	// ConfigSchema is the JSON Schema of the options the provider takes (tether workspace create
	// --provider-opt K=V).
	ConfigSchema json.RawMessage `json:"config_schema,omitempty"`
	// Error says why the plugin could not be asked (it failed to start, or crashed).
	Error string `json:"error,omitempty"`
}
