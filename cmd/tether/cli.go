package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

const defaultAddr = "http://127.0.0.1:7420"

// cli holds what every command shares: streams and how to reach the controller.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	addr, token    string
	data           string
	epoch          string // the writer epoch to claim (--epoch, TETHER_EPOCH)
	retryFor       string // how long calls are retried (--retry-for, TETHER_RETRY_FOR)
	context        string // the context to use instead of the current one (--context, TETHER_CONTEXT)
	wake           bool   // start or reopen a stopped or closed workspace for the call (--wake)
	started        bool   // cobra accepted the call and the command's own code runs
}

func (c *cli) addGlobalFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&c.addr, "addr", "", "controller address, HOST:PORT or http(s)://HOST:PORT (env TETHER_ADDR, else the context's, default "+defaultAddr+")")
	cmd.PersistentFlags().StringVar(&c.context, "context", "", "the context to use instead of the current one (env TETHER_CONTEXT; see tether context)")
	cmd.PersistentFlags().StringVar(&c.token, "token", "", "operator or API token (env TETHER_TOKEN, else the context's, default read from DATA/operator.token)")
	cmd.PersistentFlags().StringVar(&c.data, "data", "", "controller data directory (env TETHER_DATA, default ~/.tether)")
	cmd.PersistentFlags().StringVar(&c.epoch, "epoch", "", "writer epoch that writes claim, from \"tether lease acquire\" (env TETHER_EPOCH)")
	cmd.PersistentFlags().StringVar(&c.retryFor, "retry-for", "",
		"retry calls the controller could not take (unavailable, no connection) for up to `DUR`; only calls that are safe to repeat (env TETHER_RETRY_FOR, default "+client.DefaultRetryFor.String()+", 0 disables)")
}

// dataDir resolves --data, then TETHER_DATA, then ~/.tether.
func (c *cli) dataDir() string {
	if c.data != "" {
		return c.data
	}
	if d := os.Getenv("TETHER_DATA"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".tether"
	}
	return filepath.Join(home, ".tether")
}

// target is the controller a call goes to and the token it presents.
type target struct {
	addr, token string
	context     string // the context they came from, if one did
	// fromContext: the address is the context's, so a local data dir's operator token must not
	// be sent to it (it may be another machine's controller, over plain http).
	fromContext bool
}

// target resolves where to call and with what: each of address and token from its flag, else
// its environment variable, else the context (--context, TETHER_CONTEXT, else the config file's
// current one), else the default address and DATA/operator.token. A context's token goes only to
// that context's address: with the address from a flag or the environment, it is not sent.
func (c *cli) target() (target, error) {
	t := target{addr: firstNonEmpty(c.addr, os.Getenv("TETHER_ADDR")), token: firstNonEmpty(c.token, os.Getenv("TETHER_TOKEN"))}
	ctx, ok, err := c.currentContext()
	if err != nil {
		return target{}, err
	}
	if ok {
		t.context = ctx.Name
		if t.addr == "" {
			t.addr, t.fromContext = ctx.Addr, true
			if t.token == "" {
				if t.token, err = contextToken(ctx); err != nil {
					return target{}, err
				}
			}
		}
	}
	if t.addr == "" {
		t.addr = defaultAddr
	}
	return t, nil
}

// client finds the controller and the token (see target), falling back on the data dir's
// operator.token.
func (c *cli) client() (*client.Client, error) {
	t, err := c.target()
	if err != nil {
		return nil, err
	}
	addr, token := t.addr, t.token
	if token == "" && t.fromContext {
		return nil, protocol.Errorf(protocol.CodeUnauthorized,
			"context %q has no token: give it one (tether context set %s --token-file FILE), or set TETHER_TOKEN", t.context, t.context)
	}
	if token == "" {
		path := filepath.Join(c.dataDir(), controller.OperatorTokenFile)
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, protocol.Errorf(protocol.CodeUnauthorized,
					"no operator token: set TETHER_TOKEN, or TETHER_DATA/--data to the controller's data directory (%s has none), or use a context with a token (tether context set)", path)
			}
			return nil, protocol.Errorf(protocol.CodeUnauthorized, "read operator token: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	cl, err := client.New(addr, token)
	if err != nil {
		return nil, err
	}
	if r := firstNonEmpty(c.retryFor, os.Getenv("TETHER_RETRY_FOR")); r != "" {
		d, err := time.ParseDuration(r)
		if err != nil || d < 0 {
			return nil, usageError{fmt.Errorf("--retry-for %q: want a duration like 5s, or 0 to disable retries", r)}
		}
		cl = cl.WithRetryFor(d)
	}
	if e := firstNonEmpty(c.epoch, os.Getenv("TETHER_EPOCH")); e != "" {
		n, err := strconv.ParseUint(e, 10, 64)
		if err != nil || n == 0 {
			return nil, usageError{fmt.Errorf("--epoch %q: want a positive integer", e)}
		}
		cl = cl.WithEpoch(n)
	}
	if c.wake {
		cl = cl.WithWake()
	}
	return cl, nil
}

// requireEpoch is the epoch a lease command names (--epoch or TETHER_EPOCH).
func (c *cli) requireEpoch() (uint64, error) {
	e := firstNonEmpty(c.epoch, os.Getenv("TETHER_EPOCH"))
	n, err := strconv.ParseUint(e, 10, 64)
	if err != nil || n == 0 {
		return 0, usageError{fmt.Errorf("this command needs --epoch N (or TETHER_EPOCH)")}
	}
	return n, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// printJSON prints exactly one JSON value.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) printf(format string, args ...any) { fmt.Fprintf(c.stdout, format, args...) }

// printFields prints a record as aligned "Name: value" lines, leaving out empty values.
func (c *cli) printFields(rows [][2]string) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		if row[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
		}
	}
	return tw.Flush()
}
