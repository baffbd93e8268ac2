package metrics

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/protocol"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scrape reads m's exposition as Prometheus would, through its handler and the text parser.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestHostileUsageReportsAreRefused(t *testing.T) {
	m := New(func() int { return 0 })
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	bad := []protocol.UsageReport{
		{CPUPercent: math.NaN()},
		{CPUPercent: math.Inf(1)},
		{CPUPercent: math.Inf(-1)},
		{CPUPercent: -1},
		{CPUPercent: MaxCPUPercent + 1},
		{MemoryBytes: -1},
		{MemoryBytes: MaxMemoryBytes + 1},
		{DiskBytes: -5},
		{DiskBytes: math.MaxInt64},
	}
	for i, r := range bad {
		if err := m.SetUsage("al_1", "ws_1", r, at.Add(time.Duration(i)*time.Minute)); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Errorf("report %+v: got %v, want invalid_argument", r, err)
		}
	}
	if _, ok := m.Usage("al_1"); ok {
		t.Fatal("a refused report was kept")
	}
	good := protocol.UsageReport{CPUPercent: 12.5, MemoryBytes: 1 << 20, DiskBytes: 4096}
	if err := m.SetUsage("al_1", "ws_1", good, at); err != nil {
		t.Fatal(err)
	}
	// A flood: the next report within MinReportInterval is refused and the first one stays.
	flood := protocol.UsageReport{CPUPercent: 99, MemoryBytes: 1, DiskBytes: 1}
	if err := m.SetUsage("al_1", "ws_1", flood, at.Add(MinReportInterval/2)); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("report within the interval: got %v", err)
	}
	u, ok := m.Usage("al_1")
	if !ok || u.CPUPercent != 12.5 || u.MemoryBytes != 1<<20 || u.DiskBytes != 4096 || !u.SampledAt.Equal(at) {
		t.Fatalf("kept usage %+v, %v", u, ok)
	}
	fams := scrape(t, m)
	if v, _ := value(t, fams, UsageRefused.Name, nil); v != float64(len(bad)+1) {
		t.Errorf("%s = %v, want %d", UsageRefused.Name, v, len(bad)+1)
	}
	if v, ok := value(t, fams, WorkspaceMemory.Name, map[string]string{"workspace": "ws_1"}); !ok || v != 1<<20 {
		t.Errorf("%s{workspace=ws_1} = %v, %v", WorkspaceMemory.Name, v, ok)
	}
	// The runner disconnects: its workspace's series go.
	m.DropUsage("al_1")
	fams = scrape(t, m)
	for _, d := range []Def{WorkspaceCPU, WorkspaceMemory, WorkspaceDisk} {
		if _, ok := value(t, fams, d.Name, map[string]string{"workspace": "ws_1"}); ok {
			t.Errorf("%s still has ws_1 after its runner left", d.Name)
		}
	}
}

func TestRequestLabelsAreBounded(t *testing.T) {
	m := New(func() int { return 3 })
	m.Request("GET /v1/workspaces/{id}", 200, "", time.Millisecond)
	m.Request("", 404, protocol.CodeNotFound, time.Millisecond)
	// What a runner or a proxied app may make up is folded into "other".
	m.Request("GET /v1/workspaces/{id}/files/{path...}", 500, protocol.Code("made_up_by_a_runner"), time.Millisecond)
	m.Request("/v1/workspaces/{id}/services/{name}/proxy/{path...}", 799, "", time.Millisecond)
	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{APIRequests.Name, map[string]string{"route": "GET /v1/workspaces/{id}", "status": "200"}},
		{APIRequests.Name, map[string]string{"route": "unmatched", "status": "404"}},
		{APIErrors.Name, map[string]string{"route": "unmatched", "code": "not_found"}},
		{APIErrors.Name, map[string]string{"route": "GET /v1/workspaces/{id}/files/{path...}", "code": "other"}},
		{APIRequests.Name, map[string]string{"route": "/v1/workspaces/{id}/services/{name}/proxy/{path...}", "status": "other"}},
		{APIDuration.Name, map[string]string{"route": "unmatched"}},
	} {
		if v, ok := value(t, fams, c.name, c.labels); !ok || v != 1 {
			t.Errorf("%s%v = %v, %v; want 1", c.name, c.labels, v, ok)
		}
	}
	if v, _ := value(t, fams, RunnersConnected.Name, nil); v != 3 {
		t.Errorf("%s = %v, want 3", RunnersConnected.Name, v)
	}
}

// failingStore is a blob store every call of which fails as the store itself would.
type failingStore struct{ blob.Store }

var errStore = &blob.Error{Code: blob.CodeUnavailable, Message: "the store is down"}

func (failingStore) Put(_ context.Context, _ string, r io.Reader, _ string) (blob.Info, error) {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return blob.Info{}, err
	}
	return blob.Info{}, errStore
}
func (failingStore) Stat(context.Context, string) (blob.Info, error) {
	return blob.Info{}, &blob.Error{Code: blob.CodeNotFound, Message: "no such key"}
}
func (failingStore) Delete(context.Context, string) error { return errStore }

type brokenSource struct{}

func (brokenSource) Read([]byte) (int, error) { return 0, errors.New("the runner went away") }

func TestBlobErrorsCountTheStoresFailuresOnly(t *testing.T) {
	m := New(func() int { return 0 })
	s := m.CountBlobErrors(failingStore{})
	ctx := context.Background()
	_, _ = s.Put(ctx, "k", strings.NewReader("bytes"), "") // the store's failure: counted
	_, _ = s.Put(ctx, "k", brokenSource{}, "")             // the source's: not counted
	_, _ = s.Stat(ctx, "k")                                // not found: not counted
	_ = s.Delete(ctx, "k")                                 // counted
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_ = s.Delete(canceled, "k") // the caller's cancel: not counted
	fams := scrape(t, m)
	for op, want := range map[string]float64{"put": 1, "delete": 1} {
		if v, _ := value(t, fams, BlobErrors.Name, map[string]string{"op": op}); v != want {
			t.Errorf("%s{op=%s} = %v, want %v", BlobErrors.Name, op, v, want)
		}
	}
	if _, ok := value(t, fams, BlobErrors.Name, map[string]string{"op": "stat"}); ok {
		t.Error("a not-found answer counted as a blob store error")
	}
}

// TestREADMEListsEveryMetric holds the README's metrics table to Defs: it must be exactly the
// table Table makes, so a metric added, renamed or relabelled without the README fails here.
func TestREADMEListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- metrics table: generated from controller/metrics.Defs -->\n", "<!-- end of metrics table -->"
	i := bytes.Index(readme, []byte(begin))
	j := bytes.Index(readme, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("README.md has no metrics table between %q and %q", begin, end)
	}
	if got, want := string(readme[i+len(begin):j]), Table(); got != want {
		t.Errorf("README.md's metrics table is not Defs'; put this between the markers:\n%s", want)
	}
	// And every metric in the table is in the registry, with the labels the table says.
	m := New(func() int { return 0 })
	m.Run("running")
	m.Request("r", 200, "not_found", 0)
	m.Bytes(KindFileGet, 1)
	m.Capture(0, nil)
	m.Restore(0, nil)
	m.blobErrors.WithLabelValues("put").Inc()
	m.PluginRestarted("local")
	_ = m.SetUsage("al", "ws", protocol.UsageReport{}, time.Now())
	fams := scrape(t, m)
	for _, d := range Defs() {
		f := fams[d.Name]
		if f == nil {
			t.Errorf("%s is in Defs but not in the registry", d.Name)
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != d.Type {
			t.Errorf("%s is a %s, Defs says %s", d.Name, got, d.Type)
		}
		var names []string
		for _, l := range f.Metric[0].Label {
			names = append(names, l.GetName())
		}
		want := slices.Sorted(slices.Values(d.Labels)) // the exposition sorts them
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("%s has labels %v, Defs says %v", d.Name, names, d.Labels)
		}
	}
}

// A workspace whose old allocation's report landed after its disconnect and whose new one
// reports too still scrapes: one series per workspace (two would fail the whole scrape), the
// newest report's.
func TestUsageOfAReplacedAllocationScrapes(t *testing.T) {
	m := New(func() int { return 0 })
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := m.SetUsage("al_old", "ws_1", protocol.UsageReport{MemoryBytes: 1}, at); err != nil {
		t.Fatal(err)
	}
	if err := m.SetUsage("al_new", "ws_1", protocol.UsageReport{MemoryBytes: 2}, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape answered %d: %s", rec.Code, rec.Body)
	}
	if v, ok := value(t, scrape(t, m), WorkspaceMemory.Name, map[string]string{"workspace": "ws_1"}); !ok || v != 2 {
		t.Fatalf("%s{workspace=ws_1} = %v, %v; want the newest report's 2", WorkspaceMemory.Name, v, ok)
	}
	if _, ok := m.Usage("al_old"); ok {
		t.Fatal("the replaced allocation's usage is still kept")
	}
}
