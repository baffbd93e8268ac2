package daytona_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tetherhq/tether/plugins/daytona"
	"github.com/tetherhq/tether/plugins/provider"
)

// A 404 from whatever sits in front of Daytona (an HTML page from a gateway during a deploy,
// not Daytona's {statusCode, message, error}) is a failure, never "gone": gone can make the
// controller declare the workspace lost and destroy a sandbox that was there all along.
func TestGateway404IsNotGone(t *testing.T) {
	e := setup(t, nil)
	id := "al_review404"
	e.create(t, id, "tok_review")
	target, err := url.Parse(e.f.URL())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	var glitch atomic.Int32
	glitch.Store(1)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/sandbox/") && glitch.Add(-1) == 0 {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("<html><body>404 Not Found</body></html>"))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	p := daytona.New("test")
	if err := p.Configure(context.Background(), provider.Config{StateDir: t.TempDir(),
		Options: map[string]string{"api_url": proxy.URL + target.Path, "api_key_env": keyEnv}}); err != nil {
		t.Fatal(err)
	}
	st, err := p.Inspect(ctx(t), id)
	if err == nil && st.State != provider.StateGone {
		t.Fatalf("the glitch was not met: %+v", st)
	}
	if err != nil && provider.ErrorCode(err) != provider.CodeProviderFailed {
		t.Fatalf("a gateway's 404: %v, want provider_failed", err)
	}
	if st.State == provider.StateGone {
		again, _ := p.Inspect(ctx(t), id)
		_ = p.Destroy(ctx(t), id) // what loseWorkspace does next
		after, _ := p.Inspect(ctx(t), id)
		t.Fatalf("a gateway's HTML 404 is %q (%s); asked again: %s; after the loss's Destroy: %s", st.State, st.Reason, again.State, after.State)
	}
}
