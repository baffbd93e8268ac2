package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/forward"
	"github.com/tetherhq/tether/controller/retention"
)

type serveFlags struct {
	listen, advertise, peerURL, pluginDir, runnerBin string
	provider                                         string
	blobs, snapshotKey, encrypt, store               string
	readyTimeout, sweepGrace, gcInterval, gcGrace    time.Duration
	checkpointEvery                                  time.Duration
	idleStop, idleClose                              time.Duration
	wakeOnUse                                        bool
	maxFileSize                                      int64
	providerConfig                                   []string
	http                                             controller.HTTPLimits
	runners                                          controller.RunnerLimits
	retention                                        api.RetentionPolicy
	forwardPorts                                     string
	forwardLimits                                    forward.Limits
	previewListen, previewDomain                     string
	metricsListen                                    string
	log                                              logFlags
}

func newServeCmd(c *cli) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the controller",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config(c.dataDir())
			if err != nil {
				return err
			}
			if cfg.Logger, err = f.log.logger(c.stderr); err != nil {
				return err
			}
			closeListeners := func() {
				for _, l := range []net.Listener{cfg.PreviewListener, cfg.MetricsListener} {
					if l != nil {
						l.Close()
					}
				}
			}
			if f.previewListen != "" {
				if cfg.PreviewListener, err = net.Listen("tcp", f.previewListen); err != nil {
					return fmt.Errorf("--preview-listen %s: %w", f.previewListen, err)
				}
			}
			if f.metricsListen != "" {
				if cfg.MetricsListener, err = net.Listen("tcp", f.metricsListen); err != nil {
					closeListeners()
					return fmt.Errorf("--metrics-listen %s: %w", f.metricsListen, err)
				}
			}
			srv, err := controller.New(cmd.Context(), cfg)
			if err != nil {
				closeListeners()
				return err
			}
			l, err := net.Listen("tcp", f.listen)
			if err != nil {
				return fmt.Errorf("listen %s: %w", f.listen, err)
			}
			// The banner is for a person at a terminal; with --log-format json every line is a
			// JSON record (the same address is in "controller listening").
			if strings.EqualFold(f.log.format, "text") {
				fmt.Fprintf(c.stderr, "tether controller on http://%s (data %s, operator token in %s)\n",
					l.Addr(), cfg.DataDir, filepath.Join(cfg.DataDir, controller.OperatorTokenFile))
				if pl := cfg.PreviewListener; pl != nil {
					fmt.Fprintf(c.stderr, "tether previews on http://%s (hosts pv-ID.%s)\n", pl.Addr(), cfg.PreviewDomain)
				}
			}
			return srv.Serve(cmd.Context(), l)
		},
	}
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:7420", "address to listen on")
	cmd.Flags().StringVar(&f.advertise, "advertise-url", "", "base URL runners dial (default http://LISTEN); behind a load balancer, the balancer's")
	cmd.Flags().StringVar(&f.peerURL, "peer-url", "", "base URL the other controllers sharing the store reach this one on (default http://LISTEN)")
	cmd.Flags().StringVar(&f.pluginDir, "plugin-dir", "", "directory of tether-provider-* plugins (default: next to tether)")
	cmd.Flags().StringVar(&f.runnerBin, "runner-bin", "", "tether-runner binary handed to providers (default: next to tether)")
	cmd.Flags().StringVar(&f.provider, "default-provider", "local", "provider used when a workspace names none")
	cmd.Flags().DurationVar(&f.readyTimeout, "ready-timeout", 30*time.Second, "how long a new sandbox's runner may take to connect")
	cmd.Flags().StringVar(&f.store, "store", "", "state store: postgres://USER:PASS@HOST:PORT/DB?sslmode=… (default SQLite in DATA)")
	cmd.Flags().StringVar(&f.blobs, "blobs", "", "snapshot store: file:///DIR or s3://BUCKET/PREFIX?endpoint=HOST:PORT (default DATA/blobs)")
	cmd.Flags().StringVar(&f.snapshotKey, "snapshot-key", "", "age identity snapshots are encrypted to (default DATA/snapshot.key, generated)")
	cmd.Flags().StringVar(&f.encrypt, "encrypt-snapshots", "auto", "auto (on for S3), true or false")
	cmd.Flags().DurationVar(&f.sweepGrace, "sweep-grace", time.Hour, "age an object without a receipt must reach before the startup sweep removes it")
	cmd.Flags().DurationVar(&f.gcInterval, "gc-interval", 0, "run a gc sweep this often (0: never; see tether gc)")
	cmd.Flags().DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "checkpoint each workspace without an interval of its own this often (0: off; see workspace update)")
	cmd.Flags().DurationVar(&f.idleStop, "idle-stop", 0, "stop each workspace without an idle policy of its own after this long without activity (see workspace update; at least 1m)")
	cmd.Flags().DurationVar(&f.idleClose, "idle-close", 0, "close each workspace without an idle policy of its own after this long without activity (at least 1m)")
	cmd.Flags().BoolVar(&f.wakeOnUse, "wake-on-use", false, "start a stopped workspace, or reopen a closed one, for any exec, files or service call, as --wake does")
	cmd.Flags().DurationVar(&f.gcGrace, "gc-grace", 24*time.Hour, "how long a workspace stays closed before the periodic sweep may reclaim it")
	cmd.Flags().IntVar(&f.retention.KeepLast, "keep-last", 0, "default retention for gc and prune: keep each workspace's newest N receipts (unset: keep everything)")
	cmd.Flags().IntVar(&f.retention.KeepHourly, "keep-hourly", 0, "default retention: keep the newest receipt of each of the last N hours that have one")
	cmd.Flags().IntVar(&f.retention.KeepDaily, "keep-daily", 0, "default retention: keep the newest receipt of each of the last N days that have one")
	cmd.Flags().Int64Var(&f.maxFileSize, "max-file-size", 0, "largest file one write may create, in bytes (0: no limit)")
	cmd.Flags().DurationVar(&f.http.ReadHeaderTimeout, "http-read-header-timeout", controller.DefaultReadHeaderTimeout, "how long a client may take to send a request's headers")
	cmd.Flags().DurationVar(&f.http.IdleTimeout, "http-idle-timeout", controller.DefaultIdleTimeout, "how long a keep-alive connection may sit idle before it is closed")
	cmd.Flags().IntVar(&f.http.MaxHeaderBytes, "http-max-header-bytes", controller.DefaultMaxHeaderBytes, "largest request header accepted, in bytes")
	cmd.Flags().IntVar(&f.http.MaxConns, "http-max-conns", controller.DefaultMaxConns, "connections served at once (websockets included); more wait until one closes")
	cmd.Flags().IntVar(&f.runners.MaxStreams, "runner-max-streams", controller.DefaultRunnerMaxStreams, "operation streams one runner may have open towards the controller at once")
	cmd.Flags().DurationVar(&f.runners.Idle, "runner-idle-timeout", controller.DefaultRunnerIdle, "how long a capture may go without a byte from its runner")
	cmd.Flags().Int64Var(&f.runners.MaxSnapshotBytes, "max-snapshot-bytes", controller.DefaultMaxSnapshotBytes, "largest snapshot object one capture may store, in bytes")
	cmd.Flags().Int64Var(&f.runners.MaxRestoreBytes, "max-restore-bytes", 0, "longest files one restore may write in all, sparse files at their whole length, in bytes (0: --max-snapshot-bytes)")
	cmd.Flags().IntVar(&f.runners.MaxManifestEntries, "max-manifest-entries", controller.DefaultMaxManifestEntries, "most entries one snapshot may hold")
	cmd.Flags().Int64Var(&f.runners.MaxManifestBytes, "max-manifest-bytes", controller.DefaultMaxManifestBytes, "largest snapshot manifest, in bytes")
	cmd.Flags().IntVar(&f.runners.MaxStrikes, "runner-max-strikes", controller.DefaultRunnerMaxStrikes, "budget violations after which a runner is disconnected")
	cmd.Flags().StringVar(&f.forwardPorts, "forward-ports", "", "ports clients may reach in any workspace besides its services' (proxy, port-forward): a list of ports and ranges, e.g. 5432,8000-8999 (default: none)")
	cmd.Flags().IntVar(&f.forwardLimits.MaxConns, "forward-max-conns", forward.DefaultMaxConns, "connections the controller forwards into one workspace at once (proxy, previews, port-forward)")
	cmd.Flags().Int64Var(&f.forwardLimits.BytesPerSecond, "forward-bytes-per-second", 0, "bandwidth of the connections forwarded into one workspace, both ways together, in bytes per second (0: unlimited)")
	cmd.Flags().StringVar(&f.previewListen, "preview-listen", "", "also serve preview links by host name on this address: pv-ID.DOMAIN reaches a link's service at / (with --preview-domain)")
	cmd.Flags().StringVar(&f.previewDomain, "preview-domain", "", "domain of the preview listener's host names; its wildcard *.DOMAIN must resolve to it (localhost does in browsers)")
	cmd.Flags().StringVar(&f.metricsListen, "metrics-listen", "", "also serve GET /metrics without authentication on this address, for a private scrape network (the API listener's /metrics needs a token)")
	cmd.Flags().StringVar(&f.log.format, "log-format", "text", "log format: text or json (one record per line)")
	cmd.Flags().StringVar(&f.log.level, "log-level", "info", "least severe level logged: debug, info, warn or error")
	cmd.Flags().StringArrayVar(&f.providerConfig, "provider-config", nil, "configure a provider plugin: NAME.KEY=VALUE, repeatable (see \"tether provider ls\")")
	return cmd
}

func (f serveFlags) config(dataDir string) (controller.Config, error) {
	exe, err := os.Executable()
	if err != nil {
		return controller.Config{}, err
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	binDir := filepath.Dir(exe)
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return controller.Config{}, err
	}
	cfg := controller.Config{
		DataDir: abs, AdvertiseURL: f.advertise, PluginDir: firstNonEmpty(f.pluginDir, binDir),
		RunnerBinary: firstNonEmpty(f.runnerBin, filepath.Join(binDir, "tether-runner")),
		ReadyTimeout: f.readyTimeout, DefaultProvider: f.provider, Version: version,
		BlobsURL: f.blobs, StoreURL: f.store, SnapshotKeyFile: f.snapshotKey, EncryptSnapshots: f.encrypt, SweepGrace: f.sweepGrace,
		PeerURL: f.peerURL, MaxFileSize: f.maxFileSize, GCInterval: f.gcInterval, GCGrace: f.gcGrace, HTTP: f.http, Runners: f.runners,
		Retention: f.retention, CheckpointEvery: f.checkpointEvery, ForwardLimits: f.forwardLimits,
		WakeOnUse: f.wakeOnUse,
	}
	if cfg.Idle, err = controller.IdleDefault(f.idleStop, f.idleClose); err != nil {
		return cfg, usageError{err}
	}
	if cfg.ForwardPorts, err = forward.ParsePorts(f.forwardPorts); err != nil {
		return cfg, usageError{fmt.Errorf("--forward-ports: %w", err)}
	}
	if (f.previewListen == "") != (f.previewDomain == "") {
		return cfg, usageError{fmt.Errorf("--preview-listen and --preview-domain go together")}
	}
	cfg.PreviewDomain = strings.TrimPrefix(strings.ToLower(f.previewDomain), ".")
	if f.forwardLimits.MaxConns < 1 || f.forwardLimits.BytesPerSecond < 0 {
		return cfg, usageError{fmt.Errorf("--forward-max-conns must be at least 1 and --forward-bytes-per-second not negative")}
	}
	if err := retention.Check(f.retention); err != nil {
		return cfg, usageError{err}
	}
	if err := controller.CheckEvery(f.checkpointEvery); err != nil {
		return cfg, usageError{err}
	}
	for _, kv := range f.providerConfig {
		nameKey, value, ok := strings.Cut(kv, "=")
		name, key, ok2 := strings.Cut(nameKey, ".")
		if !ok || !ok2 || name == "" || key == "" {
			return cfg, usageError{fmt.Errorf("--provider-config %q: want NAME.KEY=VALUE", kv)}
		}
		if cfg.ProviderOptions == nil {
			cfg.ProviderOptions = map[string]map[string]string{}
		}
		if cfg.ProviderOptions[name] == nil {
			cfg.ProviderOptions[name] = map[string]string{}
		}
		cfg.ProviderOptions[name][key] = value
	}
	if cfg.RunnerBinary, err = filepath.Abs(cfg.RunnerBinary); err != nil {
		return cfg, err
	}
	if cfg.PluginDir, err = filepath.Abs(cfg.PluginDir); err != nil {
		return cfg, err
	}
	return cfg, nil
}
