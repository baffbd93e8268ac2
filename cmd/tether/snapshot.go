package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
)

func newSnapshotCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Aliases: []string{"snap"}, Short: "Capture, list, restore, export, verify, remove and prune snapshots"}
	var asJSON, full bool
	create := &cobra.Command{
		Use:   "create ID",
		Short: "Capture the workspace (files and Git state) into the blob store",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			act := c.startActivity("snapshot create " + display(args[0]) + ": capturing")
			snap, err := cl.CreateSnapshotWith(cmd.Context(), args[0], api.CaptureOptions{Full: full})
			act.finish()
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(snap)
			}
			c.printf("%s\n", snap.ID)
			return nil
		},
	}
	ls := &cobra.Command{
		Use:     "ls ID",
		Aliases: []string{"list"},
		Short:   "List a workspace's snapshots (receipts only)",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListSnapshots(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(list)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SNAPSHOT\tENTRIES\tSIZE\tENCRYPTED\tGIT\tCREATED\tKIND")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%s\t%s\t%s\n", s.ID, s.Entries, humanBytes(s.Bytes), s.Encrypted, gitLine(s.Git), ago(s.CreatedAt), snapshotKind(s))
			}
			return tw.Flush()
		},
	}
	show := &cobra.Command{
		Use:   "show SNAP",
		Short: "Show a snapshot's receipt and manifest summary",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			s, err := cl.GetSnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(s)
			}
			return c.printFields([][2]string{
				{"ID", s.ID}, {"Workspace", s.WorkspaceID}, {"Parent", s.Parent}, {"Object", s.ObjectKey},
				{"Size", fmt.Sprintf("%s (%d bytes)", humanBytes(s.Bytes), s.Bytes)}, {"SHA-256", s.SHA256},
				{"Encrypted", fmt.Sprint(s.Encrypted)},
				{"Entries", fmt.Sprintf("%d (%d files, %d dirs, %d symlinks, %s of content)", s.Summary.Entries, s.Summary.Files, s.Summary.Dirs, s.Summary.Symlinks, humanBytes(s.Summary.Bytes))},
				{"Git", gitLine(s.Git)}, {"Created", s.CreatedAt.Local().Format(time.RFC3339)},
			})
		},
	}
	var req api.RestoreRequest
	restore := &cobra.Command{
		Use:   "restore SNAP",
		Short: "Restore a snapshot onto a new workspace",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			act := c.startActivity("snapshot restore " + display(args[0]) + ": restoring")
			res, err := cl.RestoreSnapshot(cmd.Context(), args[0], req)
			act.finish()
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res.Workspace)
			}
			c.printf("%s\n", res.Workspace.ID)
			return nil
		},
	}
	restore.Flags().StringVar(&req.Provider, "provider", "", "provider of the new workspace")
	restore.Flags().StringVar(&req.Name, "name", "", "name of the new workspace")
	var out string
	export := &cobra.Command{
		Use:   "export SNAP -o FILE",
		Short: "Write the snapshot as a plain .tar.zst (zstd -d | tar -x reads it)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageError{fmt.Errorf("export needs -o FILE")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			// Written beside the target and renamed into place only when complete.
			tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".part-*")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			bar := c.newProgress("snapshot export " + display(args[0]))
			n, err := cl.ExportSnapshot(cmd.Context(), args[0], progressWriter{tmp, bar.add})
			bar.finish()
			if err == nil {
				err = tmp.Sync()
			}
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return err
			}
			fmt.Fprintf(c.stderr, "wrote %s (%s)\n", out, humanBytes(n))
			return nil
		},
	}
	export.Flags().StringVarP(&out, "output", "o", "", "file to write")
	verify := &cobra.Command{
		Use:   "verify SNAP",
		Short: "Re-read the stored object and check it against its receipt",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.VerifySnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(res)
			}
			c.printf("%s ok: %d bytes, sha256 %s\n", res.ID, res.Bytes, res.SHA256)
			return nil
		},
	}
	create.Flags().BoolVar(&full, "full", false, "read and store every file again instead of referring to the last receipt's bytes")
	for _, sub := range []*cobra.Command{create, ls, show, restore, verify} {
		sub.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	cmd.AddCommand(create, ls, show, restore, export, verify, newSnapshotRmCmd(c), newSnapshotPruneCmd(c))
	return cmd
}

// gitLine summarizes a manifest's git block: "main@1a2b3c4 +2 dirty".
func gitLine(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var g struct {
		Head     string `json:"head"`
		Branch   string `json:"branch"`
		Detached bool   `json:"detached"`
		Ahead    int    `json:"ahead"`
		Dirty    bool   `json:"dirty"`
	}
	if json.Unmarshal(raw, &g) != nil || g.Head == "" {
		return "-"
	}
	s := g.Branch
	if g.Detached || s == "" {
		s = "(detached)"
	}
	s += "@" + g.Head[:min(7, len(g.Head))]
	if g.Ahead > 0 {
		s += fmt.Sprintf(" +%d", g.Ahead)
	}
	if g.Dirty {
		s += " dirty"
	}
	return s
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
