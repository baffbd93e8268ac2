// Package pgtest gives tests a real PostgreSQL: TETHER_TEST_POSTGRES_URL when set (a role that
// may create databases, e.g. from `.ci/postgres start`), otherwise a throwaway server started on
// first use from the machine's initdb/pg_ctl, one per test binary, stopped by Main. Every test
// gets a database of its own (Database).
//
// A test package that uses it runs its tests through Main so the server it started is stopped:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"go.uber.org/goleak"
)

// The server of this test binary, started at most once.
var pg struct {
	once  sync.Once
	url   string // admin URL
	skip  string // why there is no server (no binaries)
	err   error
	admin *sql.DB
	stop  func()
}

// Main runs the tests and then stops the server they started, if any. It returns m.Run's code.
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// MainNoLeaks is Main for a package whose tests must leave no goroutine running (every store's
// end with its Close): it fails a passing run that did.
func MainNoLeaks(m *testing.M) int {
	code := Main(m)
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintf(os.Stderr, "goroutines left running: %v\n", err)
		code = 1
	}
	return code
}

// Stop stops the server this process started, if any: Main does after the tests; a program
// that is not a test binary but uses a testing.TB of its own (the bench) calls it when done.
// Nothing may use the server afterwards.
func Stop() {
	if pg.admin != nil {
		pg.admin.Close()
	}
	if pg.stop != nil {
		pg.stop()
	}
}

// InCI reports whether CI is set: there a missing server fails the test instead of skipping it.
func InCI() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "0" && ci != "false"
}

// Server returns the admin URL of the test server (its maintenance database, as a role that may
// create databases). Without server binaries the test is skipped, or fails when CI is set.
func Server(t testing.TB) string {
	t.Helper()
	_, u := admin(t)
	return u
}

// Admin returns a connection to the test server's maintenance database, shared by the tests.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	db, _ := admin(t)
	return db
}

func admin(t testing.TB) (*sql.DB, string) {
	t.Helper()
	pg.once.Do(func() {
		pg.url = os.Getenv("TETHER_TEST_POSTGRES_URL")
		if pg.url == "" {
			pg.url, pg.stop, pg.skip, pg.err = startPostgres()
		}
		if pg.err == nil && pg.skip == "" {
			if pg.admin, pg.err = sql.Open("pgx", pg.url); pg.err == nil {
				pg.err = pg.admin.Ping()
			}
		}
	})
	if pg.skip != "" {
		if InCI() {
			t.Fatal(pg.skip)
		}
		t.Skip(pg.skip)
	}
	if pg.err != nil {
		t.Fatalf("PostgreSQL for tests: %v", pg.err)
	}
	return pg.admin, pg.url
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// Database creates an empty database for t, dropped (connections and all) when t ends, and
// returns its URL. extra is added to the URL's query (e.g. "pool_max_conns=64").
func Database(t testing.TB, extra string) string {
	t.Helper()
	admin, adminURL := admin(t)
	name := nonWord.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = "tether_" + strings.Trim(name, "_") + "_" + randomHex(4)
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	if extra != "" {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += extra
	}
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// binDir finds a directory holding initdb, pg_ctl and postgres: TETHER_POSTGRES_BIN, then
// initdb on PATH, then the newest /usr/lib/postgresql/*/bin (Debian).
func binDir() string {
	var dirs []string
	if d := os.Getenv("TETHER_POSTGRES_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(r))
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(debian, func(a, b string) int { return major(b) - major(a) })
	dirs = append(dirs, debian...)
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if fi, err := os.Stat(filepath.Join(d, b)); err != nil || fi.Mode()&0o111 == 0 {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

func major(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// command runs a PostgreSQL program, as the postgres user when this process is root
// (PostgreSQL refuses to run as root).
type command struct {
	bin, dir string
	runuser  string // non-empty when root
}

func (c command) run(name string, args ...string) error {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.runuser != "" {
		cmd = exec.Command(c.runuser, append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.dir // a directory the server's user can enter
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// startPostgres initdbs a temporary cluster with trust authentication and starts it on a free
// port of 127.0.0.1. It returns the admin URL and a stop function, or why it cannot.
func startPostgres() (adminURL string, stop func(), skip string, err error) {
	bin := binDir()
	if bin == "" {
		return "", nil, "no PostgreSQL server binaries (initdb, pg_ctl, postgres on PATH or in /usr/lib/postgresql/*/bin): " +
			"run `.ci/deps postgres` (Debian package postgresql) or set TETHER_TEST_POSTGRES_URL", nil
	}
	dir, err := os.MkdirTemp("", "tether-pg-")
	if err != nil {
		return "", nil, "", err
	}
	c := command{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, "running as root and there is no postgres user to run PostgreSQL as: run `.ci/deps postgres` " +
				"or set TETHER_TEST_POSTGRES_URL", nil
		}
		if c.runuser, err = exec.LookPath("runuser"); err != nil {
			os.RemoveAll(dir)
			return "", nil, "", errors.New("running as root and runuser is missing: cannot start PostgreSQL as the postgres user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return "", nil, "", err
		}
	}
	data, sock := filepath.Join(dir, "data"), dir
	if err := c.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return "", nil, "", err
	}
	stop = func() {
		_ = c.run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
		os.RemoveAll(dir)
	}
	for range 3 { // a free port can be taken between probing and binding: the next try probes anew
		var port int
		if port, err = freePort(); err != nil {
			break
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "+
			"-c full_page_writes=off -c max_connections=300", port, sock)
		err = c.run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "postgres.log"), "-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), stop, "", nil
		}
		log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		err = fmt.Errorf("%v\nlog:\n%s", err, log)
	}
	stop()
	return "", nil, "", err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
