package clusterharness

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/blob/blobtest"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
)

// BlobPrefix is the key prefix of the controllers' objects in the bucket: their temporaries are
// under BlobPrefix/.tmp/.
const BlobPrefix = "tether"

// Options shape a cluster.
type Options struct {
	Controllers int      // how many controllers (default 1)
	Mode        string   // the balancer's mode: ModeHTTP (default) or ModeTCP
	ServeArgs   []string // more flags for every `tether serve`
	// RunnersDirect has each controller advertise its own address to its runners instead of
	// the balancer's, so a runner connects to the controller that started it and no runner
	// traffic crosses HAProxy: the bench's baseline of one controller without a balancer.
	RunnersDirect bool
}

// Cluster is N controllers sharing one PostgreSQL database and one S3 bucket, each in its own
// network namespace, behind one HAProxy that the test's clients and the runners both dial.
type Cluster struct {
	Net         *Network
	LB          *Balancer
	Controllers []*Controller
	Token       string // the operator token every controller accepts
	StoreURL    string // the controllers' --store, as the nodes reach it
	BlobsURL    string // the controllers' --blobs, as the nodes reach it
	S3          *blobtest.Server
	Bucket      string
	// S3Relay is how the nodes reach S3: Hold on it stalls the uploads in flight.
	S3Relay *Relay

	cliData   string // an empty TETHER_DATA, so the CLI reads no operator's ~/.tether
	hostStore string // the database's URL as the test's process reaches it
	storeOnce sync.Once
	store     *sqlstore.DB
	storeErr  error

	dbMu sync.Mutex
	db   *sql.DB // the store's database, for tests that read it (DB)
}

// New builds a cluster for t — a fresh database, a fresh bucket, the bridge and one node per
// controller, HAProxy, the controllers — and returns once the balancer sees every controller
// up. Everything is stopped and removed when t ends.
func New(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Controllers <= 0 {
		o.Controllers = 1
	}
	if o.Mode == "" {
		o.Mode = ModeHTTP
	}
	// What can be missing is looked for first, before anything is started.
	requireNetworking(t)
	if haproxyBinary() == "" {
		need(t, "haproxy (Debian package haproxy; run `.ci/deps haproxy`)")
	}
	pgURL, err := url.Parse(pgtest.Database(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	s3 := blobtest.MinIO(t)
	c := &Cluster{S3: s3, Bucket: s3.NewBucket(t), cliData: t.TempDir(), hostStore: pgURL.String()}

	c.Net = NewNetwork(t)
	pgURL.Host = c.Net.Expose(t, pgURL.Host).Addr
	c.StoreURL = pgURL.String()
	c.S3Relay = c.Net.Expose(t, s3.Endpoint)
	c.BlobsURL = "s3://" + c.Bucket + "/" + BlobPrefix + "?endpoint=" + c.S3Relay.Addr + "&insecure=true&part_size_mib=5"

	var backends []Backend
	for i := range o.Controllers {
		name := fmt.Sprintf("c%d", i+1)
		node := c.Net.AddNode(t, name)
		addr := fmt.Sprintf("%s:%d", node.IP, ControllerPort)
		c.Controllers = append(c.Controllers, &Controller{Name: name, Node: node, Addr: addr})
		backends = append(backends, Backend{Name: name, Addr: addr})
	}
	c.LB = StartBalancer(t, c.Net, o.Mode, backends)

	env := append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3.SecretKey)
	logDir := t.TempDir()
	for _, ctl := range c.Controllers {
		ctl.Data = t.TempDir()
		ctl.log = filepath.Join(logDir, ctl.Name+".log")
		ctl.env = env
		// Runners dial the balancer, like clients: any controller may get a runner.
		advertise := c.LB.BridgeURL
		if o.RunnersDirect {
			advertise = ctl.URL()
		}
		ctl.args = append([]string{"serve", "--data", ctl.Data, "--listen", ctl.Addr,
			"--advertise-url", advertise,
			"--store", c.StoreURL, "--blobs", c.BlobsURL}, o.ServeArgs...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.logs(t)
		}
		for _, ctl := range c.Controllers {
			ctl.Kill(t)
		}
		if c.store != nil {
			c.store.Close()
		}
	})

	// Every controller writes an operator token and a snapshot key into its data directory on
	// first start, and accepts only its own token and decrypts only with its own key. An
	// operator who runs several controllers shares the first one's bootstrap credential and
	// key by copying both files into the other data directories before those start; so does
	// the harness, so any controller accepts the test's token and reads any snapshot.
	first := c.Controllers[0]
	first.Start(t)
	for _, ctl := range c.Controllers[1:] {
		for _, f := range []string{"operator.token", "snapshot.key"} {
			b, err := os.ReadFile(filepath.Join(first.Data, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ctl.Data, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		ctl.Start(t)
	}
	tok, err := os.ReadFile(filepath.Join(first.Data, "operator.token"))
	if err != nil {
		t.Fatal(err)
	}
	c.Token = strings.TrimSpace(string(tok))
	c.WaitUp(t)
	if len(c.Controllers) > 1 {
		c.checkPeers(t)
	}
	return c
}

// WaitUp waits until the balancer sees every running controller up.
func (c *Cluster) WaitUp(t testing.TB) {
	t.Helper()
	for _, ctl := range c.Controllers {
		if ctl.Running() {
			c.LB.WaitState(t, ctl.Name, "UP")
		}
	}
}

// checkPeers proves each controller's node reaches the next controller directly, node to
// node across the bridge, as controllers that talk to each other will.
func (c *Cluster) checkPeers(t testing.TB) {
	t.Helper()
	for i, from := range c.Controllers {
		to := c.Controllers[(i+1)%len(c.Controllers)]
		cmd := from.Node.Command(bin("tether"), "provider", "ls", "--addr", to.URL(), "--token", c.Token)
		cmd.Env = c.cliEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("node %s cannot reach controller %s at %s: %v\n%s", from.Name, to.Name, to.URL(), err, out)
		}
	}
}

// Cut cuts controller i off the network (its veth down) and waits until the balancer's checks
// see it down. The process keeps running.
func (c *Cluster) Cut(t testing.TB, i int) {
	t.Helper()
	c.Net.Cut(t, c.Controllers[i].Node)
	c.LB.WaitState(t, c.Controllers[i].Name, "DOWN")
}

// Restore reconnects controller i and waits until the balancer sees it up.
func (c *Cluster) Restore(t testing.TB, i int) {
	t.Helper()
	c.Net.Restore(t, c.Controllers[i].Node)
	c.LB.WaitState(t, c.Controllers[i].Name, "UP")
}

// Store is the cluster's database, opened from the test's process (once; closed with the
// cluster): tests read what the controllers recorded — owners, uploads — straight from it.
func (c *Cluster) Store(t testing.TB) *sqlstore.DB {
	t.Helper()
	c.storeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.store, c.storeErr = sqlstore.Open(ctx, c.hostStore, "")
	})
	if c.storeErr != nil {
		t.Fatalf("open the cluster's store: %v", c.storeErr)
	}
	return c.store
}

// DB is a connection to the cluster's PostgreSQL database, for tests that read records no API
// shows (who owns a runner: a test reading it through a controller would only learn what that
// controller believes), opened on first use and closed when t ends.
func (c *Cluster) DB(t testing.TB) *sql.DB {
	t.Helper()
	c.dbMu.Lock()
	defer c.dbMu.Unlock()
	if c.db == nil {
		db, err := sql.Open("pgx", c.hostStore)
		if err != nil {
			t.Fatal(err)
		}
		c.db = db
		t.Cleanup(func() {
			c.dbMu.Lock()
			defer c.dbMu.Unlock()
			db.Close()
			c.db = nil
		})
	}
	return c.db
}

// Client is a Go client of the cluster, through the balancer.
func (c *Cluster) Client(t testing.TB) *client.Client {
	t.Helper()
	cl, err := client.New(c.LB.LocalURL, c.Token)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// ClientOf is a Go client of controller i alone, at its own address: for requests that must
// land on one controller in particular (the test's process reaches every node).
func (c *Cluster) ClientOf(t testing.TB, i int) *client.Client {
	t.Helper()
	cl, err := client.New(c.Controllers[i].URL(), c.Token)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Result is one CLI invocation.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// CLI runs the real tether CLI against the cluster, through the balancer.
func (c *Cluster) CLI(t testing.TB, stdin io.Reader, args ...string) Result {
	t.Helper()
	cmd := exec.Command(bin("tether"), args...)
	cmd.Env = c.cliEnv()
	cmd.Stdin = stdin
	return Run(t, cmd)
}

// Run runs cmd to its end and returns what it printed and its exit status; failing to run it at
// all fails t.
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return Result{out.String(), errb.String(), code}
}

// MustCLI runs the CLI and fails t unless it exits 0; it returns the standard output.
func (c *Cluster) MustCLI(t testing.TB, stdin io.Reader, args ...string) string {
	t.Helper()
	r := c.CLI(t, stdin, args...)
	if r.Code != 0 {
		t.Fatalf("tether %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// NodeCLI runs the CLI inside controller i's network namespace against that controller's own
// address, as a client on the same side of a partition would; ctx bounds it (a killed CLI
// reports exit code -1). It fails no test, so that it may run on any goroutine: an error is a
// CLI that could not be run.
func (c *Cluster) NodeCLI(ctx context.Context, i int, stdin io.Reader, args ...string) (Result, error) {
	ctl := c.Controllers[i]
	cmd := ctl.Node.Command(bin("tether"), args...)
	cmd.Env = append(c.cliEnv(), "TETHER_ADDR="+ctl.URL())
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("tether %v in %s: %w", args, ctl.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		err = <-done
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return Result{out.String(), errb.String(), ee.ExitCode()}, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("tether %v in %s: %w", args, ctl.Name, err)
	}
	return Result{out.String(), errb.String(), 0}, nil
}

func (c *Cluster) cliEnv() []string {
	return append(os.Environ(), "TETHER_ADDR="+c.LB.LocalURL, "TETHER_TOKEN="+c.Token,
		"TETHER_DATA="+c.cliData, "TETHER_EPOCH=")
}

// logs prints the end of every controller's log and of its runners' logs.
func (c *Cluster) logs(t testing.TB) {
	for _, ctl := range c.Controllers {
		t.Logf("controller %s (%s) log (tail):\n%s", ctl.Name, ctl.Addr, Tail(ctl.log, 32<<10))
		runners, _ := filepath.Glob(filepath.Join(ctl.Data, "providers", "local", "*", "runner.log"))
		for i, p := range runners {
			if i == 8 {
				t.Logf("… and %d more runner logs of %s", len(runners)-i, ctl.Name)
				break
			}
			t.Logf("%s (tail):\n%s", p, Tail(p, 4<<10))
		}
	}
}
