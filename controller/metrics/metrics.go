package metrics

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tetherhq/tether/protocol"
)

// Def describes one metric: the table the registry is built from and the README's list is
// checked against (TestREADMEListsEveryMetric), so neither can drift from the other.
type Def struct {
	Name   string
	Type   string // counter, gauge or histogram
	Labels []string
	Help   string
}

// The metrics, in the order the README lists them.
var (
	RunnersConnected = Def{"tether_runners_connected", "gauge", nil,
		"Runner connections this controller holds now."}
	Runs = Def{"tether_runs_total", "counter", []string{"state"},
		"Runs this controller recorded entering a state: running when started; exited, failed or lost when they end (a lost run its runner later reports finished counts again as exited)."}
	APIRequests = Def{"tether_api_requests_total", "counter", []string{"route", "status"},
		"API requests answered, by route pattern (\"unmatched\" for none) and HTTP status."}
	APIErrors = Def{"tether_api_errors_total", "counter", []string{"route", "code"},
		"API requests answered with a typed error, by route pattern and error code."}
	APIDuration = Def{"tether_api_request_duration_seconds", "histogram", []string{"route"},
		"Time from a request's arrival to its handler's return, by route pattern (a websocket's or stream's whole life)."}
	Bytes = Def{"tether_bytes_total", "counter", []string{"kind"},
		"Bytes moved, by kind: file_get, file_put (files and upload chunks), tree_import, tree_export, snapshot_capture (objects stored), snapshot_restore (archive bytes sent to a runner), snapshot_archive (archives downloaded), proxy (HTTP proxy and preview connections, both ways), port_forward (both ways)."}
	CaptureDuration = Def{"tether_snapshot_capture_duration_seconds", "histogram", []string{"result"},
		"Snapshot captures (explicit, checkpoint, close), by result: ok or error."}
	RestoreDuration = Def{"tether_snapshot_restore_duration_seconds", "histogram", []string{"result"},
		"Snapshot restores into a runner (restore, reopen, fork), by result: ok or error."}
	BlobErrors = Def{"tether_blob_errors_total", "counter", []string{"op"},
		"Blob store calls that failed, by operation (put, get, stat, delete, list, sweep); not-found answers and canceled calls are not errors."}
	PluginRestarts = Def{"tether_plugin_restarts_total", "counter", []string{"provider"},
		"Provider plugin processes found dead and started again."}
	UsageRefused = Def{"tether_usage_reports_refused_total", "counter", nil,
		"Usage reports from runners refused as malformed or out of bounds."}
	WorkspaceCPU = Def{"tether_workspace_cpu_percent", "gauge", []string{"workspace"},
		"CPU the workspace's sandbox used over its runner's last sampling interval, in percent of one CPU (200 is two CPUs busy)."}
	WorkspaceMemory = Def{"tether_workspace_memory_bytes", "gauge", []string{"workspace"},
		"Memory the workspace's sandbox uses, as its runner last sampled it."}
	WorkspaceDisk = Def{"tether_workspace_disk_bytes", "gauge", []string{"workspace"},
		"Disk the workspace's files use (allocated blocks under its root), as its runner last sampled it."}
)

// Defs lists every metric of the controller's own, in the README's order.
func Defs() []Def {
	return []Def{RunnersConnected, Runs, APIRequests, APIErrors, APIDuration, Bytes, CaptureDuration,
		RestoreDuration, BlobErrors, PluginRestarts, UsageRefused, WorkspaceCPU, WorkspaceMemory, WorkspaceDisk}
}

// Byte kinds (Bytes' kind label).
const (
	KindFileGet         = "file_get"
	KindFilePut         = "file_put"
	KindTreeImport      = "tree_import"
	KindTreeExport      = "tree_export"
	KindSnapshotCapture = "snapshot_capture"
	KindSnapshotRestore = "snapshot_restore"
	KindSnapshotArchive = "snapshot_archive"
	KindProxy           = "proxy"
	KindPortForward     = "port_forward"
)

// Metrics is one controller's registry and the metrics in it.
type Metrics struct {
	reg          *prometheus.Registry
	runs         *prometheus.CounterVec
	requests     *prometheus.CounterVec
	errors       *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	bytes        *prometheus.CounterVec
	capture      *prometheus.HistogramVec
	restore      *prometheus.HistogramVec
	blobErrors   *prometheus.CounterVec
	restarts     *prometheus.CounterVec
	usageRefused prometheus.Counter
	usage        *usageTable
}

// New makes a controller's registry: its own metrics, the Go runtime's and the process's.
// runnersConnected is read at each scrape.
func New(runnersConnected func() int) *Metrics {
	reg := prometheus.NewRegistry()
	counter := func(d Def) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.Name, Help: d.Help}, d.Labels)
	}
	// Seconds to minutes: a capture of a large tree or a restore into a remote sandbox is slow.
	slow := prometheus.ExponentialBuckets(0.01, 3, 11) // 10 ms … ~10 min
	histogram := func(d Def, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: buckets}, d.Labels)
	}
	m := &Metrics{
		reg:          reg,
		runs:         counter(Runs),
		requests:     counter(APIRequests),
		errors:       counter(APIErrors),
		duration:     histogram(APIDuration, prometheus.DefBuckets),
		bytes:        counter(Bytes),
		capture:      histogram(CaptureDuration, slow),
		restore:      histogram(RestoreDuration, slow),
		blobErrors:   counter(BlobErrors),
		restarts:     counter(PluginRestarts),
		usageRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: UsageRefused.Name, Help: UsageRefused.Help}),
		usage:        newUsageTable(),
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: RunnersConnected.Name, Help: RunnersConnected.Help},
			func() float64 { return float64(runnersConnected()) }),
		m.runs, m.requests, m.errors, m.duration, m.bytes, m.capture, m.restore, m.blobErrors, m.restarts,
		m.usageRefused, m.usage,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// The byte kinds exist from the start at 0, so a rate over them is defined before the
	// first transfer of each kind.
	for _, k := range []string{KindFileGet, KindFilePut, KindTreeImport, KindTreeExport, KindSnapshotCapture,
		KindSnapshotRestore, KindSnapshotArchive, KindProxy, KindPortForward} {
		m.bytes.WithLabelValues(k)
	}
	return m
}

// Handler serves the registry in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the controller's registry (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Request counts one answered API request: route is its pattern ("" when none matched), code
// the typed error it was answered with ("" for none).
func (m *Metrics) Request(route string, status int, code protocol.Code, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	// Statuses net/http has no name for (a proxied app may answer anything from 100 to 999)
	// share one label value.
	label := strconv.Itoa(status)
	if http.StatusText(status) == "" {
		label = "other"
	}
	m.requests.WithLabelValues(route, label).Inc()
	if code != "" {
		if !code.Known() {
			code = "other"
		}
		m.errors.WithLabelValues(route, string(code)).Inc()
	}
	m.duration.WithLabelValues(route).Observe(took.Seconds())
}

// Run counts a run entering state.
func (m *Metrics) Run(state string) { m.runs.WithLabelValues(state).Inc() }

// Bytes counts n bytes moved of kind (one of the Kind constants).
func (m *Metrics) Bytes(kind string, n int64) {
	if n > 0 {
		m.bytes.WithLabelValues(kind).Add(float64(n))
	}
}

// BytesCounter is the counter of kind, for a copy loop that adds to it as bytes pass.
func (m *Metrics) BytesCounter(kind string) prometheus.Counter { return m.bytes.WithLabelValues(kind) }

// Capture observes one snapshot capture.
func (m *Metrics) Capture(took time.Duration, err error) {
	m.capture.WithLabelValues(result(err)).Observe(took.Seconds())
}

// Restore observes one snapshot restore into a runner.
func (m *Metrics) Restore(took time.Duration, err error) {
	m.restore.WithLabelValues(result(err)).Observe(took.Seconds())
}

// PluginRestarted counts a provider plugin started again after its process died.
func (m *Metrics) PluginRestarted(provider string) { m.restarts.WithLabelValues(provider).Inc() }

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// Table is the README's list of the metrics: a Markdown table made from Defs.
func Table() string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, d := range Defs() {
		labels := "—"
		if len(d.Labels) > 0 {
			labels = "`" + strings.Join(d.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.Name, d.Type, labels, strings.ReplaceAll(d.Help, "|", "\\|"))
	}
	return b.String()
}
