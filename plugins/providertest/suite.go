package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

// Env adapts the suite to one provider.
type Env struct {
	// Config is validated and adopted by every plugin instance the suite
	// opens. Use the same StateDir for all of them.
	Config provider.Config
	// BadConfigs must each fail ValidateConfig with invalid_argument, in
	// addition to an unknown option, which every provider must refuse.
	BadConfigs []provider.Config
	// Options and Resources go into every Create.
	Options   map[string]string
	Resources provider.Resources
	// Listen is where the fake controller listens (default 127.0.0.1:0);
	// the runner is told http://<that address>.
	Listen string
	// ReadyTimeout bounds each wait for the runner to call in (default 60s).
	ReadyTimeout time.Duration
	// MakeForeign plants, under the name the provider would give allocation
	// id, a sandbox the provider did not create (a container without its
	// labels, a directory without its marker); ForeignExists reports whether
	// it is still there. Leave both nil to skip the foreign checks.
	MakeForeign   func(t *testing.T, id string)
	ForeignExists func(t *testing.T, id string) bool
	// Check, when set, looks at a freshly created allocation with
	// provider-specific means (limits, labels, hardening).
	Check func(t *testing.T, alloc provider.Allocation, hello Hello)
	// Leftovers, when set, lists what the provider keeps for allocation id
	// by its own means (containers, networks, directories): the suite wants
	// nothing after a failed Create or a Destroy.
	Leftovers func(t *testing.T, id string) []string
}

// Run runs the contract against the provider open returns. open is called
// more than once: a second plugin instance must manage allocations a first
// one created (the controller restarts plugins).
func Run(t *testing.T, open func(t *testing.T) provider.Provider, env Env) {
	if env.ReadyTimeout == 0 {
		env.ReadyTimeout = time.Minute
	}
	s := &suite{env: env, fc: startFakeController(t, env.Listen)}
	s.runner1 = Build(t, FakeRunnerPackage, "tether-runner", "-X main.version=v1")
	s.runner2 = Build(t, FakeRunnerPackage, "tether-runner", "-X main.version=v2")
	s.p = open(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, id := range s.created {
			_ = s.p.Destroy(ctx, id)
		}
	})
	// A failed step that later ones build on (the allocation they share)
	// ends the run; the others are reported and the run goes on.
	steps := []struct {
		name  string
		fn    func(t *testing.T)
		gates bool
	}{
		{"Info", s.info, false},
		{"ValidateConfig", s.validateConfig, false},
		{"Configure", func(t *testing.T) { must(t, "Configure", s.p.Configure(ctx(t), env.Config)) }, true},
		{"CreateBadRequests", s.createBadRequests, false},
		{"CreateStartsRunner", s.create, true},
		{"InspectRunning", func(t *testing.T) { s.waitState(t, s.id, provider.StateRunning) }, true},
		{"CreateTwiceConflicts", s.createTwice, false},
		{"Endpoint", s.endpoint, false},
		{"StopKeepsSandbox", s.stop, true},
		{"Archive", s.archive, false},
		{"InstallRunnerAndStart", s.installAndStart, true},
		{"SecondPluginInstance", func(t *testing.T) { s.secondInstance(t, open) }, false},
		{"DestroyIsFinalAndIdempotent", s.destroy, false},
		{"UnknownAndMalformedIDs", s.unknownIDs, false},
		{"ForeignRefused", s.foreign, false},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.fn) && st.gates {
			t.Fatalf("contract step %s failed; the later steps depend on it", st.name)
		}
	}
}

type suite struct {
	env     Env
	fc      *fakeController
	p       provider.Provider
	runner1 string
	runner2 string
	id      string // the allocation most steps work on
	root    string
	created []string
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func newID(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func (s *suite) request(id, token string) provider.CreateRequest {
	return provider.CreateRequest{
		WorkspaceID: "ws-" + id, AllocationID: id, ControllerURL: s.fc.url, RunnerToken: token,
		RunnerBinary: s.runner1, Resources: s.env.Resources, Options: s.env.Options,
		Labels: map[string]string{"providertest": "yes"}, ControllerSocket: s.fc.socket,
	}
}

// noLeftovers fails the test when the provider still keeps something of id.
func (s *suite) noLeftovers(t *testing.T, id, after string) {
	t.Helper()
	if s.env.Leftovers == nil {
		return
	}
	if left := s.env.Leftovers(t, id); len(left) > 0 {
		t.Errorf("after %s, the provider still has %v for %s", after, left, id)
	}
}

func (s *suite) info(t *testing.T) {
	info, err := s.p.Info(ctx(t))
	must(t, "Info", err)
	if info.Name == "" || info.Version == "" {
		t.Errorf("Info = %+v: name and version are required", info)
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(info.ConfigSchema), &schema); err != nil {
		t.Fatalf("config schema is not JSON: %v\n%s", err, info.ConfigSchema)
	}
	if schema["type"] != "object" {
		t.Errorf("config schema type = %v, want object", schema["type"])
	}
}

func (s *suite) validateConfig(t *testing.T) {
	c := ctx(t)
	must(t, "ValidateConfig(env.Config)", s.p.ValidateConfig(c, s.env.Config))
	junk := provider.Config{StateDir: s.env.Config.StateDir, Options: map[string]string{"no-such-option-xyzzy": "1"}}
	wantCode(t, "ValidateConfig(unknown option)", s.p.ValidateConfig(c, junk), provider.CodeInvalidArgument)
	for _, bad := range s.env.BadConfigs {
		wantCode(t, "ValidateConfig(bad config)", s.p.ValidateConfig(c, bad), provider.CodeInvalidArgument)
	}
}

func (s *suite) createBadRequests(t *testing.T) {
	c := ctx(t)
	cases := map[string]func(r *provider.CreateRequest){
		"no token":           func(r *provider.CreateRequest) { r.RunnerToken = "" },
		"relative URL":       func(r *provider.CreateRequest) { r.ControllerURL = "not a url" },
		"unknown option":     func(r *provider.CreateRequest) { r.Options = map[string]string{"no-such-option-xyzzy": "1"} },
		"missing runner":     func(r *provider.CreateRequest) { r.RunnerBinary = "/nonexistent/tether-runner" },
		"malformed id":       func(r *provider.CreateRequest) { r.AllocationID = "../escape" },
		"reserved env":       func(r *provider.CreateRequest) { r.Env = map[string]string{provider.EnvRunnerToken: "x"} },
		"relative runner":    func(r *provider.CreateRequest) { r.RunnerBinary = "tether-runner" },
		"empty workspace id": func(r *provider.CreateRequest) { r.WorkspaceID = "" },
	}
	for name, mod := range cases {
		id := newID("pt-bad-")
		req := s.request(id, "tok-"+id)
		mod(&req)
		_, err := s.p.Create(c, req)
		if err == nil {
			s.created = append(s.created, id)
			t.Errorf("Create with %s succeeded", name)
			continue
		}
		if code := provider.ErrorCode(err); code != provider.CodeInvalidArgument && code != provider.CodeNotFound {
			t.Errorf("Create with %s: %v, want invalid_argument or not_found", name, err)
		}
		if req.AllocationID == id {
			// A failed Create leaves nothing behind.
			st, err := s.p.Inspect(c, id)
			if err != nil || st.State != provider.StateGone {
				t.Errorf("after a failed Create (%s), Inspect = %+v, %v; want gone", name, st, err)
			}
			s.noLeftovers(t, id, "a failed Create ("+name+")")
		}
	}
}

func (s *suite) create(t *testing.T) {
	c := ctx(t)
	s.id = newID("pt-")
	token := "tok1-" + s.id
	s.created = append(s.created, s.id)
	alloc, err := s.p.Create(c, s.request(s.id, token))
	must(t, "Create", err)
	if alloc.ID != s.id || !path.IsAbs(alloc.Root) {
		t.Fatalf("Create = %+v: want id %s and an absolute root", alloc, s.id)
	}
	for k, v := range alloc.Info {
		if strings.Contains(v, token) {
			t.Errorf("allocation info %s leaks the bootstrap token", k)
		}
	}
	s.root = alloc.Root
	h := s.fc.wait(t, "hello", s.id, token, s.env.ReadyTimeout)
	if h.Token != token || h.TokenInEnv {
		t.Errorf("runner token: got %q (still in env: %v), want %q, removed", h.Token, h.TokenInEnv, token)
	}
	if h.Version != "v1" {
		t.Errorf("runner version %q, want v1 (the binary Create was given)", h.Version)
	}
	if h.Workspace != "ws-"+s.id || h.Root != alloc.Root || h.Cwd != alloc.Root {
		t.Errorf("runner started with workspace %q, root %q, cwd %q; want ws-%s and %s for both", h.Workspace, h.Root, h.Cwd, s.id, alloc.Root)
	}
	switch got := h.Getenv(provider.EnvControllerURL); {
	case got == s.fc.url && h.Via == "tcp":
	case strings.HasPrefix(got, "unix:///") && h.Via == "unix":
	default:
		t.Errorf("runner controller URL %q (reached the fake controller by %s), want %q or the controller socket as unix:///PATH", got, h.Via, s.fc.url)
	}
	if h.MarkerBefore != "" || !h.RootWritable {
		t.Errorf("fresh root: marker %q, writable %v (%s); want an empty, writable root", h.MarkerBefore, h.RootWritable, h.Error)
	}
	if s.env.Check != nil {
		s.env.Check(t, alloc, h)
	}
}

func (s *suite) waitState(t *testing.T, id string, want provider.State) {
	t.Helper()
	deadline := time.Now().Add(s.env.ReadyTimeout)
	for {
		st, err := s.p.Inspect(ctx(t), id)
		must(t, "Inspect", err)
		if st.State == want {
			return
		}
		if st.State != provider.StateCreating || time.Now().After(deadline) {
			t.Fatalf("Inspect(%s) = %+v, want %s", id, st, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *suite) createTwice(t *testing.T) {
	_, err := s.p.Create(ctx(t), s.request(s.id, "tok-again"))
	wantCode(t, "second Create of the same id", err, provider.CodeConflict)
	s.waitState(t, s.id, provider.StateRunning)
	err = s.p.Start(ctx(t), provider.StartRequest{AllocationID: s.id, RunnerToken: "tok-start-running"})
	wantCode(t, "Start of a running allocation", err, provider.CodeConflict)
}

func (s *suite) endpoint(t *testing.T) {
	ep, err := s.p.Endpoint(ctx(t), s.id, 8080)
	must(t, "Endpoint", err)
	u, err := url.Parse(ep.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		t.Errorf("Endpoint URL %q is not an absolute http(s) URL", ep.URL)
	}
	for _, port := range []int{0, -1, 65536} {
		_, err := s.p.Endpoint(ctx(t), s.id, port)
		wantCode(t, "Endpoint with a bad port", err, provider.CodeInvalidArgument)
	}
}

func (s *suite) stop(t *testing.T) {
	must(t, "Stop", s.p.Stop(ctx(t), s.id))
	// The runner was asked to stop (SIGTERM), not just killed.
	s.fc.wait(t, "bye", s.id, "tok1-"+s.id, 10*time.Second)
	s.waitState(t, s.id, provider.StateStopped)
	must(t, "second Stop", s.p.Stop(ctx(t), s.id))
	s.waitState(t, s.id, provider.StateStopped)
}

func (s *suite) archive(t *testing.T) {
	info, err := s.p.Info(ctx(t))
	must(t, "Info", err)
	err = s.p.Archive(ctx(t), s.id)
	if !slices.Contains(info.Capabilities, provider.CapArchive) {
		wantCode(t, "Archive without the archive capability", err, provider.CodeUnsupported)
		return
	}
	must(t, "Archive", err)
	st, err := s.p.Inspect(ctx(t), s.id)
	must(t, "Inspect", err)
	if st.State != provider.StateArchived && st.State != provider.StateStopped {
		t.Fatalf("after Archive, Inspect = %+v", st)
	}
}

func (s *suite) installAndStart(t *testing.T) {
	must(t, "InstallRunner", s.p.InstallRunner(ctx(t), s.id, s.runner2))
	wantCode(t, "InstallRunner of a missing binary",
		s.p.InstallRunner(ctx(t), s.id, "/nonexistent/tether-runner"), provider.CodeNotFound)
	wantCode(t, "Start without a token",
		s.p.Start(ctx(t), provider.StartRequest{AllocationID: s.id}), provider.CodeInvalidArgument)
	token := "tok2-" + s.id
	must(t, "Start", s.p.Start(ctx(t), provider.StartRequest{AllocationID: s.id, RunnerToken: token}))
	h := s.fc.wait(t, "hello", s.id, token, s.env.ReadyTimeout)
	if h.Version != "v2" {
		t.Errorf("restarted runner is %q, want v2 (the one InstallRunner installed)", h.Version)
	}
	if h.MarkerBefore == "" || h.Root != s.root {
		t.Errorf("restarted runner: root %q (was %q), marker %q: the files did not survive Stop", h.Root, s.root, h.MarkerBefore)
	}
	if h.TokenInEnv {
		t.Error("the token stayed in the restarted runner's environment")
	}
	s.waitState(t, s.id, provider.StateRunning)
}

func (s *suite) secondInstance(t *testing.T, open func(t *testing.T) provider.Provider) {
	p2 := open(t)
	must(t, "Configure (second instance)", p2.Configure(ctx(t), s.env.Config))
	st, err := p2.Inspect(ctx(t), s.id)
	must(t, "Inspect (second instance)", err)
	if st.State != provider.StateRunning {
		t.Fatalf("a second plugin instance sees %+v, want running", st)
	}
	must(t, "Stop (second instance)", p2.Stop(ctx(t), s.id))
	s.fc.wait(t, "bye", s.id, "tok2-"+s.id, 10*time.Second)
}

func (s *suite) destroy(t *testing.T) {
	c := ctx(t)
	must(t, "Destroy", s.p.Destroy(c, s.id))
	st, err := s.p.Inspect(c, s.id)
	must(t, "Inspect after Destroy", err)
	if st.State != provider.StateGone {
		t.Fatalf("after Destroy, Inspect = %+v, want gone", st)
	}
	must(t, "second Destroy", s.p.Destroy(c, s.id))
	s.notFound(t, s.id)
	s.noLeftovers(t, s.id, "Destroy")

	// Destroy of a running allocation stops its runner too.
	id := newID("pt-")
	s.created = append(s.created, id)
	_, err = s.p.Create(c, s.request(id, "tok-"+id))
	must(t, "Create", err)
	s.fc.wait(t, "hello", id, "tok-"+id, s.env.ReadyTimeout)
	must(t, "Destroy (running)", s.p.Destroy(c, id))
	if st, err := s.p.Inspect(c, id); err != nil || st.State != provider.StateGone {
		t.Fatalf("after Destroy of a running allocation, Inspect = %+v, %v", st, err)
	}
	s.noLeftovers(t, id, "Destroy of a running allocation")
}

// notFound checks every operation but Inspect and Destroy refuses id.
func (s *suite) notFound(t *testing.T, id string) {
	t.Helper()
	c := ctx(t)
	wantCode(t, "Stop", s.p.Stop(c, id), provider.CodeNotFound)
	wantCode(t, "Start", s.p.Start(c, provider.StartRequest{AllocationID: id, RunnerToken: "t"}), provider.CodeNotFound)
	_, err := s.p.Endpoint(c, id, 80)
	wantCode(t, "Endpoint", err, provider.CodeNotFound)
	wantCode(t, "InstallRunner", s.p.InstallRunner(c, id, s.runner1), provider.CodeNotFound)
	if err := s.p.Archive(c, id); provider.ErrorCode(err) != provider.CodeNotFound && provider.ErrorCode(err) != provider.CodeUnsupported {
		t.Errorf("Archive(%s) = %v, want not_found or unsupported", id, err)
	}
}

func (s *suite) unknownIDs(t *testing.T) {
	c := ctx(t)
	id := newID("pt-never-")
	st, err := s.p.Inspect(c, id)
	if err != nil || st.State != provider.StateGone {
		t.Errorf("Inspect of a never-created id = %+v, %v; want gone", st, err)
	}
	must(t, "Destroy of a never-created id", s.p.Destroy(c, id))
	s.notFound(t, id)
	for _, bad := range []string{"", "..", "../x", "a/b", "-rf", "a b", strings.Repeat("x", 300)} {
		_, err := s.p.Inspect(c, bad)
		wantCode(t, "Inspect("+bad+")", err, provider.CodeInvalidArgument)
		wantCode(t, "Stop("+bad+")", s.p.Stop(c, bad), provider.CodeInvalidArgument)
		wantCode(t, "Destroy("+bad+")", s.p.Destroy(c, bad), provider.CodeInvalidArgument)
	}
}

func (s *suite) foreign(t *testing.T) {
	if s.env.MakeForeign == nil {
		t.Skip("Env.MakeForeign is not set")
	}
	c := ctx(t)
	id := newID("pt-foreign-")
	s.env.MakeForeign(t, id)
	_, err := s.p.Inspect(c, id)
	wantCode(t, "Inspect", err, provider.CodeForeign)
	wantCode(t, "Stop", s.p.Stop(c, id), provider.CodeForeign)
	wantCode(t, "Start", s.p.Start(c, provider.StartRequest{AllocationID: id, RunnerToken: "t"}), provider.CodeForeign)
	wantCode(t, "Destroy", s.p.Destroy(c, id), provider.CodeForeign)
	wantCode(t, "InstallRunner", s.p.InstallRunner(c, id, s.runner1), provider.CodeForeign)
	_, err = s.p.Endpoint(c, id, 80)
	wantCode(t, "Endpoint", err, provider.CodeForeign)
	if err := s.p.Archive(c, id); provider.ErrorCode(err) != provider.CodeForeign && provider.ErrorCode(err) != provider.CodeUnsupported {
		t.Errorf("Archive = %v, want foreign or unsupported", err)
	}
	_, err = s.p.Create(c, s.request(id, "tok-"+id))
	if code := provider.ErrorCode(err); code != provider.CodeConflict && code != provider.CodeForeign {
		t.Errorf("Create over a foreign sandbox = %v, want conflict or foreign", err)
	}
	if !s.env.ForeignExists(t, id) {
		t.Fatal("the foreign sandbox was removed")
	}
	s.noLeftovers(t, id, "a Create over a foreign sandbox")
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := provider.ErrorCode(err); got != code {
		t.Errorf("%s = %v, want code %s", what, err, code)
	}
}
