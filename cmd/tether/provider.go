package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

func newProviderCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "provider", Aliases: []string{"providers"}, Short: "Show the sandbox provider plugins"}
	cmd.AddCommand(newProviderLsCmd(c))
	return cmd
}

func newProviderLsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the provider plugins next to the controller, their versions and options",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListProviders(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(list)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tCAPABILITIES\tOPTIONS")
			for _, p := range list {
				if p.Error != "" {
					fmt.Fprintf(tw, "%s\t-\terror: %s\t\n", p.Name, firstLine(p.Error))
					continue
				}
				names := optionNames(schemaOptions(p.ConfigSchema))
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Version, orDash(strings.Join(p.Capabilities, ",")), orDash(strings.Join(names, ",")))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, p := range list {
				printOptions(c, p)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, config schemas included")
	return cmd
}

// schemaOption is one property of a provider's config schema.
type schemaOption struct {
	Name        string
	Description string `json:"description"`
	Default     string `json:"default"`
}

func schemaOptions(schema json.RawMessage) []schemaOption {
	var s struct {
		Properties map[string]schemaOption `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	out := make([]schemaOption, 0, len(s.Properties))
	for name, o := range s.Properties {
		o.Name = name
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func optionNames(opts []schemaOption) []string {
	names := make([]string, len(opts))
	for i, o := range opts {
		names[i] = o.Name
	}
	return names
}

func printOptions(c *cli, p api.ProviderInfo) {
	opts := schemaOptions(p.ConfigSchema)
	if len(opts) == 0 {
		return
	}
	c.printf("\n%s options (tether workspace create --provider %s --provider-opt K=V):\n", p.Name, p.Name)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, o := range opts {
		def := ""
		if o.Default != "" {
			def = "[" + o.Default + "]"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", o.Name, def, o.Description)
	}
	_ = tw.Flush()
}

// parseProviderOpts turns repeated --provider-opt K=V flags into a map.
func parseProviderOpts(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, protocol.Errorf(protocol.CodeInvalidArgument, "--provider-opt %q: want KEY=VALUE", kv)
		}
		if _, dup := out[k]; dup {
			return nil, protocol.Errorf(protocol.CodeInvalidArgument, "--provider-opt %s given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
