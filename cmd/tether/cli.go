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
}

func (c *cli) addGlobalFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&c.addr, "addr", "", "controller address (env TETHER_ADDR, default "+defaultAddr+")")
	cmd.PersistentFlags().StringVar(&c.token, "token", "", "operator or API token (env TETHER_TOKEN, default read from DATA/operator.token)")
	cmd.PersistentFlags().StringVar(&c.data, "data", "", "controller data directory (env TETHER_DATA, default ~/.tether)")
	cmd.PersistentFlags().StringVar(&c.epoch, "epoch", "", "writer epoch from `tether lease acquire` that writes claim (env TETHER_EPOCH)")
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

// client finds the controller from --addr/TETHER_ADDR and the token from --token/TETHER_TOKEN or
// the data dir's operator.token.
func (c *cli) client() (*client.Client, error) {
	addr := firstNonEmpty(c.addr, os.Getenv("TETHER_ADDR"), defaultAddr)
	token := firstNonEmpty(c.token, os.Getenv("TETHER_TOKEN"))
	if token == "" {
		path := filepath.Join(c.dataDir(), controller.OperatorTokenFile)
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, protocol.Errorf(protocol.CodeUnauthorized,
					"no operator token: set TETHER_TOKEN, or TETHER_DATA/--data to the controller's data directory (%s has none)", path)
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
