package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/tetherhq/tether/protocol"
)

// The README's generated parts sit between these markers; everything else in it is written by
// hand.
const (
	beginCommands = "<!-- BEGIN GENERATED: cli commands (go generate ./cmd/tether) -->"
	endCommands   = "<!-- END GENERATED: cli commands -->"
	beginExits    = "<!-- BEGIN GENERATED: exit statuses (go generate ./cmd/tether) -->"
	endExits      = "<!-- END GENERATED: exit statuses -->"
)

// cliDocPath is the full reference, relative to the repository root.
const cliDocPath = "docs/cli.md"

func newDocsCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:    "docs REPO_ROOT",
		Short:  "Write the CLI reference (docs/cli.md and the README's generated sections) from the commands",
		Hidden: true,
		Args:   exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			readme := filepath.Join(args[0], "README.md")
			old, err := os.ReadFile(readme)
			if err != nil {
				return err
			}
			updated, err := generateReadme(cmd.Root(), string(old))
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(args[0], "docs"), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(args[0], cliDocPath), []byte(cliReference(cmd.Root())), 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(readme, []byte(updated), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(c.stderr, "wrote %s and README.md's generated sections\n", cliDocPath)
			return nil
		},
	}
}

// documented are the commands the reference shows: not hidden, not cobra's help.
func documented(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	walk(root, func(cmd *cobra.Command) {
		for p := cmd; p != nil; p = p.Parent() {
			if p.Hidden || p.Name() == "help" || p.Name() == cobra.ShellCompRequestCmd || p.Name() == cobra.ShellCompNoDescRequestCmd {
				return
			}
		}
		out = append(out, cmd)
	})
	return out
}

// generateReadme replaces the README's generated sections.
func generateReadme(root *cobra.Command, readme string) (string, error) {
	var cmds strings.Builder
	cmds.WriteString("| command | what it does |\n|---|---|\n")
	for _, cmd := range documented(root) {
		if !cmd.Runnable() || cmd.HasSubCommands() {
			continue
		}
		anchor := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
		fmt.Fprintf(&cmds, "| [`%s`](%s#%s) | %s |\n", mdCell(cmd.CommandPath()), cliDocPath, anchor, mdCell(cmd.Short))
	}
	out, err := replaceBetween(readme, beginCommands, endCommands, cmds.String())
	if err != nil {
		return "", err
	}
	return replaceBetween(out, beginExits, endExits, exitTable())
}

// exitTable is the table of exit statuses, from protocol's.
func exitTable() string {
	var b strings.Builder
	b.WriteString("| code | exit | | code | exit |\n|---|---|---|---|---|\n")
	codes := protocol.Codes()
	half := (len(codes) + 1) / 2
	for i := 0; i < half; i++ {
		fmt.Fprintf(&b, "| `%s` | %d |", codes[i], codes[i].ExitCode())
		if j := i + half; j < len(codes) {
			fmt.Fprintf(&b, " | `%s` | %d |\n", codes[j], codes[j].ExitCode())
		} else {
			b.WriteString(" | | |\n")
		}
	}
	return b.String()
}

func replaceBetween(s, begin, end, body string) (string, error) {
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("README.md lacks the markers %q … %q", begin, end)
	}
	return s[:i+len(begin)] + "\n" + body + s[j:], nil
}

// cliReference is docs/cli.md: every command with its usage, description and flags.
func cliReference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("# tether CLI reference\n\n")
	b.WriteString("Generated from the commands themselves by `go generate ./cmd/tether` (a test fails when\n")
	b.WriteString("this file and the commands disagree); do not edit by hand.\n\n")
	b.WriteString("## Global flags\n\nEvery command takes these.\n\n")
	writeFlags(&b, root.PersistentFlags())
	for _, cmd := range documented(root) {
		if cmd == root {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", cmd.CommandPath(), cmd.Short)
		if cmd.Long != "" {
			fmt.Fprintf(&b, "%s\n\n", cmd.Long)
		}
		if cmd.HasSubCommands() {
			b.WriteString("Commands:")
			for _, sub := range cmd.Commands() {
				if !sub.Hidden && sub.Name() != "help" {
					fmt.Fprintf(&b, " [`%s`](#%s)", sub.Name(), strings.ReplaceAll(sub.CommandPath(), " ", "-"))
				}
			}
			b.WriteString("\n\n")
			continue
		}
		fmt.Fprintf(&b, "```\n%s\n```\n\n", cmd.UseLine())
		if len(cmd.Aliases) > 0 {
			fmt.Fprintf(&b, "Aliases: %s\n\n", strings.Join(cmd.Aliases, ", "))
		}
		if cmd.HasLocalFlags() {
			writeFlags(&b, cmd.LocalNonPersistentFlags())
		}
	}
	return b.String()
}

func writeFlags(b *strings.Builder, fs *pflag.FlagSet) {
	var rows bytes.Buffer
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		valueName, usage := pflag.UnquoteUsage(f)
		if valueName != "" {
			name += " " + valueName
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0" && f.DefValue != "0s" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&rows, "| `%s` | %s | %s |\n", mdCell(name), def, mdCell(usage))
	})
	if rows.Len() == 0 {
		return
	}
	b.WriteString("| flag | default | what it does |\n|---|---|---|\n")
	b.Write(rows.Bytes())
	b.WriteString("\n")
}

// mdCell escapes what would end a Markdown table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
