package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// logsRetryFor bounds how long `service logs --follow` keeps reconnecting without getting
// anywhere (the runner or the controller away).
const logsRetryFor = 2 * time.Minute

func newServiceCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "service", Aliases: []string{"svc"}, Short: "Start, list, read logs of, reach and stop a workspace's services"}
	cmd.AddCommand(newServiceStartCmd(c), newServiceLsCmd(c), newServiceLogsCmd(c), newServiceEndpointCmd(c), newServiceURLCmd(c), newServiceStopCmd(c))
	c.addWakeFlag(cmd, true)
	return cmd
}

func newServiceStartCmd(c *cli) *cobra.Command {
	var spec protocol.ServiceSpec
	var port string
	var readyTimeout time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "start ID NAME [--port N|auto] [--ready http:/PATH|tcp|none] [--env K=V]... [--restart on-failure] -- CMD [ARG...]",
		Short: "Start a service and return once it is observed ready (or exit non-zero with why it failed)",
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) < 3 || cmd.ArgsLenAtDash() != 2 {
				return usageError{fmt.Errorf("usage: tether service start ID NAME [flags] -- CMD [ARG...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			for _, kv := range spec.Env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usageError{fmt.Errorf("--env %q: want KEY=VALUE", kv)}
				}
			}
			switch port {
			case "", "auto":
			default:
				n, err := strconv.Atoi(port)
				if err != nil || n < 1 || n > 65535 {
					return usageError{fmt.Errorf("--port %q: want a port number or auto", port)}
				}
				spec.Port = n
			}
			if r := spec.Ready; r != "" && r != "tcp" && r != "none" && !strings.HasPrefix(r, "http:") {
				return usageError{fmt.Errorf("--ready %q: want http:/PATH, tcp or none", r)}
			}
			if r := spec.Restart; r != "" && r != "never" && r != "on-failure" {
				return usageError{fmt.Errorf("--restart %q: want never or on-failure", r)}
			}
			spec.Name, spec.Argv = a[1], a[2:]
			spec.ReadyTimeout = protocol.Duration(readyTimeout)
			cl, err := c.client()
			if err != nil {
				return err
			}
			v, err := cl.StartService(cmd.Context(), a[0], spec)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(v)
			}
			c.printf("service %s %s%s (pid %d)\n", v.Name, v.State, withPort(v.Port), v.PID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&port, "port", "auto", "port the service listens on, or auto (a free one, passed as $PORT)")
	f.StringVar(&spec.PortEnv, "port-env", "", "environment variable the port is passed in (default PORT)")
	f.StringVar(&spec.Ready, "ready", "", "readiness check: tcp (default: a connection accepted on the port), http:/PATH (a 2xx/3xx answer) or none (started is ready, for a service with no port)")
	f.DurationVar(&readyTimeout, "ready-timeout", 0, "how long the service may take to get ready (default 30s)")
	f.StringArrayVarP(&spec.Env, "env", "e", nil, "set an environment variable (KEY=VALUE), repeatable")
	f.StringVar(&spec.Cwd, "cwd", "", "working directory, relative to the workspace root")
	f.StringVar(&spec.Restart, "restart", "", "restart policy: never (default) or on-failure")
	f.IntVar(&spec.MaxRestarts, "max-restarts", 0, "with --restart on-failure, restart at most this many times (default 3)")
	f.StringVar(&spec.StopPolicy, "stop", "", "stop policy: manual (default), on-run-finish (with --run, or the newest running run) or idle:DUR (no connection and no log output for DUR)")
	f.StringVar(&spec.Run, "run", "", "the run whose end stops the service (implies --stop on-run-finish)")
	f.IntVar(&spec.LogBytes, "log-bytes", 0, "size of the service's log ring in bytes (default 1 MiB); older bytes are dropped")
	f.BoolVar(&asJSON, "json", false, "print the service as JSON")
	return cmd
}

func withPort(port int) string {
	if port == 0 {
		return ""
	}
	return " on port " + strconv.Itoa(port)
}

func newServiceLsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls ID",
		Aliases: []string{"list"},
		Short:   "List a workspace's services",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListServices(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(list)
			}
			return c.printServices(list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the services as JSON")
	return cmd
}

func (c *cli) printServices(list []api.Service) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tSTATE\tPORT\tPID\tRESTARTS\tSTARTED\tREASON")
	for _, v := range list {
		port, pid, started := "-", "-", "-"
		if v.Port > 0 {
			port = strconv.Itoa(v.Port)
		}
		if v.PID > 0 {
			pid = strconv.Itoa(v.PID)
		}
		if v.StartedAt != nil {
			started = ago(*v.StartedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.Name, v.State, port, pid, v.Restarts, started, v.Reason)
	}
	return tw.Flush()
}

func newServiceLogsCmd(c *cli) *cobra.Command {
	var follow bool
	var since int64
	cmd := &cobra.Command{
		Use:   "logs ID NAME [--follow] [--since-offset N]",
		Short: "Print a service's log bytes; --follow keeps printing new ones, resuming across dropped connections",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since < 0 {
				return usageError{fmt.Errorf("--since-offset must not be negative")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			offset := since
			lastProgress := time.Now()
			for {
				res, err := cl.ServiceLogs(ctx, args[0], args[1], offset, follow, c.stdout)
				if res.Start > offset {
					// Said on stderr, so stdout stays the log's own bytes.
					fmt.Fprintf(c.stderr, "tether: log bytes %d-%d of service %s were overwritten in the runner's log ring before they were read; resuming at %d\n",
						offset, res.Start, args[1], res.Start)
				}
				if res.End != offset {
					lastProgress = time.Now()
				}
				offset = res.End
				if err == nil && res.Overrun {
					continue
				}
				if err == nil || !follow || ctx.Err() != nil || protocol.CodeOf(err) != protocol.CodeUnavailable {
					return err
				}
				if time.Since(lastProgress) > logsRetryFor {
					return fmt.Errorf("giving up after %s without progress: %w", logsRetryFor, err)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(500 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new log bytes until the service stops")
	cmd.Flags().Int64Var(&since, "since-offset", 0, "start at this byte offset of the log")
	return cmd
}

func newServiceEndpointCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "endpoint ID NAME [--json]",
		Short: "Print the URL a ready service is reached at through the controller's proxy (needs the operator token; --json: details)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ep, err := cl.ServiceEndpoint(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(ep)
			}
			// The URL alone, so $(tether service endpoint …) is usable as it is.
			c.printf("%s\n", ep.URL)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the endpoint as JSON: the proxy URL, the headers it needs, the provider's own address")
	return cmd
}

func newServiceURLCmd(c *cli) *cobra.Command {
	var asJSON, revoke, list bool
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "url ID NAME [--ttl 1h] [--json] | --revoke | --list",
		Short: "Print a preview link of a ready service: a URL a browser opens without the operator token, until it expires or is revoked",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if revoke && list {
				return usageError{fmt.Errorf("--revoke and --list do not go together")}
			}
			if cmd.Flags().Changed("ttl") && (revoke || list) {
				return usageError{fmt.Errorf("--ttl goes with a new link, not with --revoke or --list")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			switch {
			case revoke:
				n, err := cl.RevokePreviews(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				if asJSON {
					return c.printJSON(api.PreviewsRevoked{Revoked: n})
				}
				c.printf("revoked %d preview link(s) of service %s\n", n, args[1])
				return nil
			case list:
				ps, err := cl.ListPreviews(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				if asJSON {
					return c.printJSON(ps)
				}
				tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PREVIEW\tSTATE\tCREATED\tEXPIRES")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.ID, p.State, p.CreatedAt.Local().Format(time.RFC3339), p.ExpiresAt.Local().Format(time.RFC3339))
				}
				return tw.Flush()
			}
			var ttlArg string
			if cmd.Flags().Changed("ttl") {
				ttlArg = ttl.String()
			}
			p, err := cl.CreatePreview(ctx, args[0], args[1], ttlArg)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(p)
			}
			c.printf("%s\n", p.URL)
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&ttl, "ttl", time.Hour, "how long the link works (at most 168h)")
	f.BoolVar(&revoke, "revoke", false, "revoke every live preview link of the service")
	f.BoolVar(&list, "list", false, "list the service's preview links (without their URLs)")
	f.BoolVar(&asJSON, "json", false, "print as JSON (a new link: its id, path URL, expiry)")
	return cmd
}

func newServiceStopCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stop ID NAME",
		Short: "Stop a service; returns once its processes are gone and its port is closed",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			v, err := cl.StopService(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(v)
			}
			c.printf("service %s %s\n", v.Name, v.State)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the service as JSON")
	return cmd
}

// demoService starts a small HTTP service in the demo's workspace, prints its proxy URL, makes a
// preview link and fetches the service once through it, shows its log and stops it. The sandbox has no Go toolchain: it uses python3's
// http.server, or a netcat loop, and skips with a note when it has neither.
func demoService(ctx context.Context, c *cli, cl *client.Client, demoCLI func(...string) error, step func(string, ...any), ws api.Workspace) error {
	var probe bytes.Buffer
	if _, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", "command -v python3 >/dev/null && echo python3 || { command -v nc >/dev/null && echo nc; }"}}, nil, &probe, io.Discard); err != nil {
		return err
	}
	spec := protocol.ServiceSpec{Name: "web"}
	switch strings.TrimSpace(probe.String()) {
	case "python3":
		spec.Argv, spec.Ready = []string{"sh", "-c", "exec python3 -u -m http.server --bind 127.0.0.1 $PORT 2>&1"}, "http:/"
	case "nc":
		spec.Argv, spec.Ready = []string{"sh", "-c", `while true; do printf 'HTTP/1.0 200 OK\r\n\r\nok\n' | nc -l -p $PORT; done`}, "tcp"
	default:
		c.printf("(service step skipped: the sandbox has neither python3 nor nc)\n")
		return nil
	}
	step("tether service start %s web --port auto --ready %s -- %s", ws.Name, spec.Ready, strings.Join(spec.Argv, " "))
	v, err := cl.StartService(ctx, ws.ID, spec)
	if err != nil {
		return err
	}
	c.printf("service %s %s%s (pid %d)\n", v.Name, v.State, withPort(v.Port), v.PID)
	step("tether service endpoint %s web   # the controller's proxy URL (needs the operator token)", ws.Name)
	if err := demoCLI("service", "endpoint", ws.ID, "web"); err != nil {
		return err
	}
	step("tether service url %s web --ttl 10m   # a preview link a browser opens without the token", ws.Name)
	p, err := cl.CreatePreview(ctx, ws.ID, "web", "10m")
	if err != nil {
		return err
	}
	c.printf("%s\n", p.URL)
	step("curl %s   # through the controller and the runner, no token", p.URL)
	if err := demoFetch(ctx, c, p.URL); err != nil {
		return err
	}
	step("tether service logs %s web", ws.Name)
	if err := demoCLI("service", "logs", ws.ID, "web"); err != nil {
		return err
	}
	step("tether service stop %s web   # returns once the processes are gone and the port is closed", ws.Name)
	return demoCLI("service", "stop", ws.ID, "web")
}

// demoFetch GETs u and prints its status and the first lines of its body.
func demoFetch(ctx context.Context, c *cli, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	lines := strings.SplitN(string(b), "\n", 4)
	c.printf("%s\n%s\n", resp.Status, strings.Join(lines[:min(len(lines), 3)], "\n"))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}
