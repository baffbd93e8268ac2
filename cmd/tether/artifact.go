package main

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
)

func newArtifactCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "artifact", Aliases: []string{"art"}, Short: "Store, list, show and revoke artifacts (saved, untrusted bytes)"}
	var asJSON bool
	var workspace, name string
	put := &cobra.Command{
		Use:   "put FILE --workspace ID",
		Short: "Store a file as an untrusted artifact owned by a workspace",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if workspace == "" {
				return usageError{fmt.Errorf("--workspace is required")}
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			if name == "" {
				name = filepath.Base(args[0])
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			a, err := cl.PutArtifact(cmd.Context(), workspace, name, f)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(a)
			}
			c.printf("%s %d bytes sha256 %s (untrusted)\n", a.ID, a.Bytes, a.SHA256)
			return nil
		},
	}
	put.Flags().StringVarP(&workspace, "workspace", "w", "", "owning workspace (id or name)")
	put.Flags().StringVar(&name, "name", "", "artifact name (default: the file's base name)")
	ls := &cobra.Command{
		Use:     "ls WS",
		Aliases: []string{"list"},
		Short:   "List a workspace's artifacts",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListArtifacts(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(list)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ARTIFACT\tNAME\tSIZE\tSHA-256\tSTATE\tCREATED")
			for _, a := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Name, humanBytes(a.Bytes), a.SHA256[:min(12, len(a.SHA256))], artifactState(a), ago(a.CreatedAt))
			}
			return tw.Flush()
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show an artifact's record",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			a, err := cl.GetArtifact(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(a)
			}
			return printArtifact(c, a)
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an artifact at once: fetches are refused, transfers in flight aborted",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			a, err := cl.RevokeArtifact(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(a)
			}
			c.printf("%s revoked\n", a.ID)
			return nil
		},
	}
	for _, sub := range []*cobra.Command{put, ls, show, revoke} {
		sub.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	cmd.AddCommand(put, ls, show, revoke)
	return cmd
}

func artifactState(a api.Artifact) string {
	if a.RevokedAt != nil {
		return "revoked"
	}
	return "active"
}

func printArtifact(c *cli, a api.Artifact) error {
	revoked := ""
	if a.RevokedAt != nil {
		revoked = a.RevokedAt.Local().Format(time.RFC3339)
	}
	return c.printFields([][2]string{
		{"ID", a.ID}, {"Owner", a.WorkspaceID}, {"Name", a.Name},
		{"Size", fmt.Sprintf("%s (%d bytes)", humanBytes(a.Bytes), a.Bytes)}, {"SHA-256", a.SHA256},
		{"Object", a.ObjectKey}, {"Untrusted", fmt.Sprint(a.Untrusted)}, {"Revoked", revoked},
		{"Created", a.CreatedAt.Local().Format(time.RFC3339)},
	})
}
