package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// handleListProviders answers GET /v1/providers: every tether-provider-* plugin next to the
// controller, asked for its name, version, capabilities and config schema. A plugin that does
// not start is listed with the reason.
func (s *Server) handleListProviders(w http.ResponseWriter, r *http.Request) {
	list, err := s.ListProviders(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// ListProviders describes the discovered provider plugins.
func (s *Server) ListProviders(ctx context.Context) ([]api.ProviderInfo, error) {
	names, err := s.providers.Discover()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "list provider plugins: %v", err)
	}
	out := make([]api.ProviderInfo, 0, len(names))
	for _, name := range names {
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		info, path, err := s.providers.Info(ictx, name)
		cancel()
		p := api.ProviderInfo{Name: name, Path: path}
		if err != nil {
			p.Error = protocol.AsError(err).Message
			out = append(out, p)
			continue
		}
		if info.Name != name {
			p.Error = "the plugin calls itself " + info.Name
		}
		p.Version, p.Capabilities = info.Version, info.Capabilities
		if json.Valid([]byte(info.ConfigSchema)) {
			p.ConfigSchema = json.RawMessage(info.ConfigSchema)
		}
		out = append(out, p)
	}
	return out, nil
}
