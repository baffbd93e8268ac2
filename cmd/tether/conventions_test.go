package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// tether runs the CLI in-process with no controller reachable.
func tether(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return tetherIn(t, "", args...)
}

func tetherIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUnknownCommandsExit2WithASuggestion(t *testing.T) {
	t.Setenv("TETHER_CONFIG", t.TempDir()+"/config.yaml")
	for _, tc := range []struct {
		args    []string
		message string
	}{
		{[]string{"worksapce", "ls"}, `unknown command "worksapce" for "tether"; did you mean "workspace"?`},
		{[]string{"workspace", "lss"}, `unknown command "lss" for "tether workspace"; did you mean "ls"?`},
		{[]string{"ws", "lss"}, `unknown command "lss" for "tether workspace"; did you mean "ls"?`},
		{[]string{"snapshot", "restor", "X"}, `unknown command "restor" for "tether snapshot"; did you mean "restore"?`},
		// No project removal exists in the API: refused, and no far-fetched suggestion ("ls").
		{[]string{"project", "rm", "P"}, `unknown command "rm" for "tether project" (see 'tether project --help')`},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "tether completion"`},
		{[]string{"context", "swtich", "x"}, `unknown command "swtich" for "tether context"`},
		{[]string{"workspace", "show"}, "tether workspace show takes 1 argument(s), got 0"},
		{[]string{"workspace", "ls", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"version", "extra"}, "tether version takes 0 argument(s), got 1"},
	} {
		code, stdout, stderr := tether(t, tc.args...)
		if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "error: invalid_argument: ") || !strings.Contains(stderr, tc.message) ||
			strings.Count(stderr, "\n") != 1 {
			t.Errorf("tether %s: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.message)
		}
	}
}

func TestGroupsAloneAndHelpOfEveryCommand(t *testing.T) {
	t.Setenv("TETHER_CONFIG", t.TempDir()+"/config.yaml")
	root := newRootCmd(&cli{})
	groups := 0
	walk(root, func(cmd *cobra.Command) {
		path := strings.Fields(cmd.CommandPath())[1:]
		// Without Args, cobra takes any words after a command silently.
		if cmd.Runnable() && cmd.Args == nil && cmd.Name() != "help" {
			t.Errorf("%s does not check its arguments", cmd.CommandPath())
		}
		code, stdout, stderr := tether(t, append(path, "--help")...)
		if code != 0 || !strings.Contains(stdout, "Usage:") || stderr != "" {
			t.Errorf("%s --help: exit %d, stderr %q, stdout %q", cmd.CommandPath(), code, stderr, stdout)
		}
		if !cmd.HasSubCommands() {
			return
		}
		groups++
		// A group alone prints its help, as docker, gh and kubectl do, and says "[command]"
		// rather than a usage that suggests it runs alone.
		code, stdout, stderr = tether(t, path...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, cmd.CommandPath()+" [command]") ||
			strings.Contains(stdout, cmd.CommandPath()+" [flags]\n") {
			t.Errorf("%s alone: exit %d, stderr %q, stdout %q", cmd.CommandPath(), code, stderr, stdout)
		}
	})
	if groups < 10 {
		t.Fatalf("walked %d groups; the tree is not what this test thinks", groups)
	}
}

// pflag takes a `backquoted` word of a usage string as the flag's value name: a sentence quoted
// that way turns "--epoch string" into "--epoch tether lease acquire".
func TestFlagValueNamesAreNames(t *testing.T) {
	root := newRootCmd(&cli{})
	valueName := regexp.MustCompile(`^[A-Za-z0-9_.:=|/-]*$`)
	flags := 0
	walk(root, func(cmd *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{cmd.LocalFlags(), cmd.InheritedFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				flags++
				name, usage := pflag.UnquoteUsage(f)
				if !valueName.MatchString(name) || len(name) > 24 {
					t.Errorf("%s --%s: value name %q (usage %q)", cmd.CommandPath(), f.Name, name, usage)
				}
				if strings.TrimSpace(usage) == "" {
					t.Errorf("%s --%s has no usage", cmd.CommandPath(), f.Name)
				}
			})
		}
	})
	if flags < 100 {
		t.Fatalf("saw %d flags; the walk is broken", flags)
	}
	// And the test can fail: the defect it guards against is caught.
	f := &pflag.Flag{Name: "epoch", Value: newStringValue(), Usage: "writer epoch from `tether lease acquire`"}
	if name, _ := pflag.UnquoteUsage(f); valueName.MatchString(name) {
		t.Fatalf("a mangled value name %q passes the check", name)
	}
}

func newStringValue() pflag.Value {
	var s string
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.StringVar(&s, "x", "", "")
	return fs.Lookup("x").Value
}

// Cobra runs only the nearest PersistentPreRunE: one below the root would hide the root's, and
// errors of that command's calls would no longer be told from usage errors.
func TestOnlyTheRootHasPersistentPreRun(t *testing.T) {
	root := newRootCmd(&cli{})
	walk(root, func(cmd *cobra.Command) {
		if cmd != root && (cmd.PersistentPreRun != nil || cmd.PersistentPreRunE != nil) {
			t.Errorf("%s has a PersistentPreRun", cmd.CommandPath())
		}
	})
}

func TestVersion(t *testing.T) {
	t.Setenv("TETHER_CONFIG", t.TempDir()+"/config.yaml")
	code, stdout, stderr := tether(t, "version", "--client", "--json")
	var v versionInfo
	if code != 0 || stderr != "" || json.Unmarshal([]byte(stdout), &v) != nil || v.Client.Version != version || v.Server != nil || v.ServerError != "" {
		t.Fatalf("version --client --json: exit %d, %q, %q", code, stdout, stderr)
	}
	// No controller: the client's version is still printed, and it is not an error.
	code, stdout, stderr = tether(t, "--addr", "127.0.0.1:1", "version")
	if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "Client: tether "+version+" (") ||
		!strings.Contains(stdout, "Server: not reachable: cannot reach the controller at http://127.0.0.1:1") {
		t.Fatalf("version without a controller: exit %d, %q, %q", code, stdout, stderr)
	}
	code, _, stderr = tether(t, "--addr", "ftp://x:1", "version", "--json")
	if code != 0 || stderr != "" {
		t.Fatalf("version with a bad address: exit %d, %q", code, stderr)
	}
}

func TestCompletionTableNamesCommands(t *testing.T) {
	root := newRootCmd(&cli{})
	paths := map[string]*cobra.Command{}
	walk(root, func(cmd *cobra.Command) { paths[cmd.CommandPath()] = cmd })
	for path := range completedArgs() {
		cmd, ok := paths[path]
		if !ok {
			t.Errorf("completion for %q: no such command", path)
			continue
		}
		if cmd.ValidArgsFunction == nil {
			t.Errorf("%s: no completion registered", path)
		}
	}
	for path, flag := range flagsNamingWorkspaces() {
		if cmd, ok := paths[path]; !ok || cmd.Flags().Lookup(flag) == nil {
			t.Errorf("completion for %s --%s: no such command or flag", path, flag)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, stdout, stderr := tether(t, "completion", sh)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "__complete") {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", sh, code, stderr, len(stdout))
		}
	}
}

func TestCompletableRefusesWhatBreaksAShell(t *testing.T) {
	for s, want := range map[string]bool{"web": true, "ws_abc": true, "a b": false, "a\tb": false, "a\nb": false, "\x1b[2J": false, "": false, "bad\xff": false} {
		if completable(s) != want {
			t.Errorf("completable(%q) = %v", s, !want)
		}
	}
}
