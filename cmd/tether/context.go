package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/cmd/tether/cliconfig"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// maxTokenBytes bounds a token read from a file or stdin: tokens are tens of bytes.
const maxTokenBytes = 4 << 10

// loadConfig reads the CLI's config file; a broken one is invalid_argument naming it.
func loadConfig() (*cliconfig.Config, string, error) {
	path, err := cliconfig.Path()
	if err != nil {
		return nil, "", protocol.Errorf(protocol.CodeInvalidArgument, "%v", err)
	}
	cfg, err := cliconfig.Load(path)
	if err != nil {
		return nil, path, protocol.Errorf(protocol.CodeInvalidArgument, "config file: %v", err)
	}
	return cfg, path, nil
}

// currentContext is the context in force: --context, TETHER_CONTEXT, else the file's current.
// Naming one that does not exist is an error, never a silent fallback to another controller.
func (c *cli) currentContext() (cliconfig.Context, bool, error) {
	cfg, path, err := loadConfig()
	if err != nil {
		return cliconfig.Context{}, false, err
	}
	name := firstNonEmpty(c.context, os.Getenv("TETHER_CONTEXT"))
	if name == "" {
		name = cfg.Current
		if name == "" {
			return cliconfig.Context{}, false, nil
		}
	}
	ctx, ok := cfg.Get(name)
	if !ok {
		return cliconfig.Context{}, false, protocol.Errorf(protocol.CodeNotFound, "no context %q in %s; see \"tether context ls\"", name, path)
	}
	return ctx, true, nil
}

// contextToken is the token a context holds or names.
func contextToken(ctx cliconfig.Context) (string, error) {
	if ctx.TokenFile == "" {
		return ctx.Token, nil
	}
	tok, err := readToken(ctx.TokenFile)
	if err != nil {
		return "", protocol.Errorf(protocol.CodeUnauthorized, "context %s: token file: %v", ctx.Name, err)
	}
	return tok, nil
}

func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return readTokenFrom(f, path)
}

func readTokenFrom(r io.Reader, what string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTokenBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("%s: larger than %d bytes, not a token", what, maxTokenBytes)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%s: want one token on one line", what)
	}
	return tok, nil
}

func newContextCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "Name controllers and switch between them (like kubectl's and docker's contexts)",
		Long: "A context is a controller's address and the token to use there, kept in " +
			"~/.config/tether/config.yaml ($XDG_CONFIG_HOME/tether/config.yaml; TETHER_CONFIG names " +
			"another file), written 0600. Each of --addr and --token wins over TETHER_ADDR and " +
			"TETHER_TOKEN, which win over the context (--context, TETHER_CONTEXT, else the current one), " +
			"which wins over the defaults. A context's token is sent only to its own address.",
	}
	cmd.AddCommand(newContextLsCmd(c), newContextUseCmd(c), newContextSetCmd(c), newContextRmCmd(c), newContextCurrentCmd(c))
	return cmd
}

func newContextLsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the contexts; the current one is marked *",
		Args:    exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			cfg, _, err := loadConfig()
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					cliconfig.Context
					HasToken bool `json:"has_token"`
					Current  bool `json:"current"`
				}
				rows := []row{}
				for _, x := range cfg.Contexts {
					rows = append(rows, row{x, x.Token != "" || x.TokenFile != "", x.Name == cfg.Current})
				}
				return c.printJSON(rows)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tADDR\tTOKEN")
			for _, x := range cfg.Contexts {
				cur, tok := "", "-"
				if x.Name == cfg.Current {
					cur = "*"
				}
				switch {
				case x.TokenFile != "":
					tok = "file " + display(x.TokenFile)
				case x.Token != "":
					tok = "in config" // never printed
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cur, x.Name, x.Addr, tok)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (never the token)")
	return cmd
}

func newContextUseCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:               "use NAME",
		Short:             "Make NAME the current context",
		Args:              exactArgs(1),
		ValidArgsFunction: completeContexts,
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, path, err := loadConfig()
			if err != nil {
				return err
			}
			if _, ok := cfg.Get(args[0]); !ok {
				return protocol.Errorf(protocol.CodeNotFound, "no context %q in %s; see \"tether context ls\"", args[0], path)
			}
			cfg.Current = args[0]
			if err := cfg.Save(path); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			fmt.Fprintf(c.stderr, "current context: %s\n", args[0])
			return nil
		},
	}
}

func newContextSetCmd(c *cli) *cobra.Command {
	var addr, tokenFile string
	var tokenStdin, use bool
	cmd := &cobra.Command{
		Use:   "set NAME [--addr ADDR] [--token-file FILE | --token-stdin]",
		Short: "Create or change a context (a new one needs --addr)",
		Long: "Create or change a context. The token is kept as a file's path (--token-file, read at each " +
			"call) or in the config file itself (--token-stdin, or the global --token, which shows it " +
			"to ps). Flags not given keep their value.",
		Args:              exactArgs(1),
		ValidArgsFunction: completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !cliconfig.ValidName(name) {
				return usageError{fmt.Errorf("context name %q: want letters, digits, '.', '_' or '-', at most 63", name)}
			}
			inline := cmd.Flags().Changed("token")
			if n := btoi(inline) + btoi(tokenStdin) + btoi(tokenFile != ""); n > 1 {
				return usageError{errors.New("give one of --token, --token-stdin and --token-file")}
			}
			cfg, path, err := loadConfig()
			if err != nil {
				return err
			}
			ctx, existed := cfg.Get(name)
			ctx.Name = name
			if addr != "" {
				u, err := client.ParseAddr(addr)
				if err != nil {
					return err
				}
				ctx.Addr = u.String()
			} else if !existed {
				return usageError{fmt.Errorf("a new context needs --addr")}
			}
			switch {
			case tokenFile != "":
				abs, err := filepath.Abs(tokenFile)
				if err != nil {
					return err
				}
				if _, err := readToken(abs); err != nil {
					return protocol.Errorf(protocol.CodeInvalidArgument, "--token-file: %v", err)
				}
				ctx.TokenFile, ctx.Token = abs, ""
			case tokenStdin:
				tok, err := readTokenFrom(c.stdin, "stdin")
				if err != nil {
					return protocol.Errorf(protocol.CodeInvalidArgument, "--token-stdin: %v", err)
				}
				ctx.Token, ctx.TokenFile = tok, ""
			case inline:
				tok, err := readTokenFrom(strings.NewReader(c.token), "--token")
				if err != nil {
					return protocol.Errorf(protocol.CodeInvalidArgument, "%v", err)
				}
				ctx.Token, ctx.TokenFile = tok, ""
			}
			cfg.Set(ctx)
			if use || cfg.Current == "" && !existed && len(cfg.Contexts) == 1 {
				cfg.Current = name // the first context made is the one meant
			}
			if err := cfg.Save(path); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			fmt.Fprintf(c.stderr, "context %s: %s (in %s)\n", name, ctx.Addr, path)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "", "the controller's address, HOST:PORT or http(s)://HOST:PORT")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "a file holding the token, read at each call")
	cmd.Flags().BoolVar(&tokenStdin, "token-stdin", false, "read the token from stdin and keep it in the config file")
	cmd.Flags().BoolVar(&use, "use", false, "also make it the current context")
	return cmd
}

func newContextRmCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:               "rm NAME",
		Aliases:           []string{"remove"},
		Short:             "Remove a context (when current, no context is current after)",
		Args:              exactArgs(1),
		ValidArgsFunction: completeContexts,
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, path, err := loadConfig()
			if err != nil {
				return err
			}
			if !cfg.Remove(args[0]) {
				return protocol.Errorf(protocol.CodeNotFound, "no context %q in %s", args[0], path)
			}
			if err := cfg.Save(path); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			fmt.Fprintf(c.stderr, "removed context %s\n", args[0])
			return nil
		},
	}
}

func newContextCurrentCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "current",
		Short: "Print the context in force (--context, TETHER_CONTEXT, else the current one)",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			ctx, ok, err := c.currentContext()
			if err != nil {
				return err
			}
			if !ok {
				return protocol.Errorf(protocol.CodeNotFound, "no current context; see \"tether context use NAME\"")
			}
			c.printf("%s\n", ctx.Name)
			return nil
		},
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// completeContexts completes context names from the config file.
func completeContexts(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, x := range cfg.Contexts {
		names = append(names, x.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
