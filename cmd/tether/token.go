package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
)

func newTokenCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make, list and revoke API tokens (needs the operator token or an unlimited API token)",
		Long: "API tokens are credentials for the controller's API kept in its store, so every controller\n" +
			"sharing the store accepts them. A token limited to workspaces (--workspace) sees and acts\n" +
			"on those alone: any other is not_found to it. Use one as TETHER_TOKEN or --token.",
	}
	var asJSON bool
	var workspaces []string
	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create NAME [--workspace WS]... [--ttl DUR]",
		Short: "Make an API token and print its secret, once",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < 0 {
				return usageError{fmt.Errorf("--ttl %s: want a positive duration, or 0 for a token that lasts until revoked", ttl)}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			req := api.CreateTokenRequest{Name: args[0], Workspaces: workspaces}
			if ttl > 0 {
				req.TTL = ttl.String()
			}
			t, err := cl.CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(t)
			}
			c.printf("%s\n", t.Token)
			// The secret alone on stdout (scripts capture it); what to know about it on stderr.
			fmt.Fprintf(c.stderr, "token %s: %s, %s. This secret is not shown again: keep it now.\n",
				t.Name, tokenScope(t), tokenExpiry(t))
			return nil
		},
	}
	create.Flags().StringArrayVarP(&workspaces, "workspace", "w", nil, "limit the token to this workspace (id or name); repeatable; none: not limited")
	create.Flags().DurationVar(&ttl, "ttl", 0, "how long the token lasts (0: until revoked)")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List API tokens, revoked and expired ones included (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(list)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tWORKSPACES\tSTATE\tEXPIRES\tCREATED")
			for _, t := range list {
				ws := "all"
				if len(t.Workspaces) > 0 {
					ws = strings.Join(t.Workspaces, ",")
				}
				expires := "-"
				if t.ExpiresAt != nil {
					expires = t.ExpiresAt.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, ws, tokenState(t), expires, ago(t.CreatedAt))
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke an API token at once: every call with it is refused from now on",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.RevokeToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			c.printf("%s revoked\n", args[0])
			return nil
		},
	}
	for _, sub := range []*cobra.Command{create, ls} {
		sub.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	cmd.AddCommand(create, ls, revoke)
	return cmd
}

func tokenState(t api.Token) string {
	switch {
	case t.Revoked:
		return "revoked"
	case t.Expired:
		return "expired"
	}
	return "live"
}

func tokenScope(t api.Token) string {
	if len(t.Workspaces) == 0 {
		return "not limited to workspaces"
	}
	return "limited to " + strings.Join(t.Workspaces, ", ")
}

func tokenExpiry(t api.Token) string {
	if t.ExpiresAt == nil {
		return "lasts until revoked"
	}
	return "expires " + t.ExpiresAt.Local().Format(time.RFC3339)
}
