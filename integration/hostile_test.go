package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// refusals are the typed codes a hostile input may be answered with.
var refusals = []protocol.Code{protocol.CodePathEscape, protocol.CodeSymlinkRefused, protocol.CodeInvalidPath,
	protocol.CodeNotFound, protocol.CodeNotDirectory, protocol.CodeExists, protocol.CodeInvalidArgument, protocol.CodeConflict}

// lexical says which codes the guard owes an input it can refuse from the text alone.
var lexical = map[category][]protocol.Code{
	catAbsolute:  {protocol.CodePathEscape, protocol.CodeInvalidPath},
	catDotDot:    {protocol.CodePathEscape, protocol.CodeInvalidPath},
	catMalformed: {protocol.CodeInvalidPath, protocol.CodePathEscape},
}

// hostileOp is one operation of the files API, run on an input path.
type hostileOp struct {
	name string
	// onLink: whether the operation may succeed on a symlink itself (acting on the link,
	// inside the root); every other operation must refuse one.
	onLink bool
	run    func(ctx context.Context, cl *client.Client, id, p string) (any, error)
}

const putContent = "written by the hostile corpus\n"

var hostileOps = []hostileOp{
	{"ls", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.ListFiles(ctx, id, p, "", 0)
	}},
	{"stat", true, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.StatFile(ctx, id, p)
	}},
	{"get", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		var buf bytes.Buffer
		_, err := cl.ReadFile(ctx, id, p, &buf, client.ReadOptions{})
		return buf.Bytes(), err
	}},
	{"get-range", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		var buf bytes.Buffer
		_, err := cl.ReadFile(ctx, id, p, &buf, client.ReadOptions{Offset: 1, Length: 4})
		return buf.Bytes(), err
	}},
	{"put", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.WriteFile(ctx, id, p, strings.NewReader(putContent), client.WriteOptions{})
	}},
	{"put-replace", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.WriteFile(ctx, id, p, strings.NewReader(putContent), client.WriteOptions{Replace: true})
	}},
	{"mkdir", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.Mkdir(ctx, id, p, false, 0)
	}},
	{"mkdir-p", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.Mkdir(ctx, id, p, true, 0)
	}},
	{"rm", true, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return nil, cl.Remove(ctx, id, p, false)
	}},
	{"rm-r", true, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return nil, cl.Remove(ctx, id, p, true)
	}},
	{"mv-from", true, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.Rename(ctx, id, p, "renamed-by-corpus", false)
	}},
	{"mv-to", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.Rename(ctx, id, "mv-source.txt", p, false)
	}},
	{"mv-to-replace", true, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.Rename(ctx, id, "mv-source.txt", p, true)
	}},
	{"chmod", false, func(ctx context.Context, cl *client.Client, id, p string) (any, error) {
		return cl.Chmod(ctx, id, p, 0o640)
	}},
}

// judge checks one case's outcome: a typed refusal where one is owed, and, for a success,
// nothing of the outside in what came back.
func (e *hostileEnv) judge(in hostileInput, op string, onLink bool, out any, err error) (ok bool) {
	t := e.t
	t.Helper()
	what := fmt.Sprintf("%s %s", op, in)
	if err != nil {
		code := codeOf(err)
		if !slices.Contains(refusals, code) {
			t.Errorf("%s: want a typed refusal, got %v", what, err)
		}
		if want, ok := lexical[in.cat]; ok && !slices.Contains(want, code) {
			t.Errorf("%s: want one of %v before any syscall, got %v", what, want, err)
		}
		return false
	}
	if in.cat.mustFail() || (in.cat == catFinalLink && !onLink) {
		t.Errorf("%s: succeeded (%+v); it must be refused", what, out)
	}
	switch v := out.(type) {
	case []byte:
		if bytes.Contains(v, []byte(e.marker)) {
			t.Errorf("%s: returned the content of an outside file", what)
		}
	case protocol.FsListResult:
		for _, ent := range v.Entries {
			if strings.Contains(ent.Name, canary) || strings.Contains(ent.Name, "marker") {
				t.Errorf("%s: listed an outside entry %q", what, ent.Name)
			}
		}
	case protocol.FileInfo:
		// stat describes the link; mv and mkdir describe what they made.
		if op == "stat" && in.cat == catFinalLink && v.Type != protocol.FileSymlink {
			t.Errorf("%s: described the link's target, not the link: %+v", what, v)
		}
	}
	return true
}

// Every hostile input against every operation, through the Go client: nothing outside the root
// is read, created, modified or removed, and the refusals are typed.
func TestHostileCorpusEveryOperation(t *testing.T) {
	e := newHostileEnv(t)
	cl := e.c.Client(t)
	corpus := e.corpus()
	if len(corpus) < 200 {
		t.Fatalf("the corpus has %d inputs; want at least 200", len(corpus))
	}
	var cases, succeeded int
	byCode := map[protocol.Code]int{}
	for _, op := range hostileOps {
		for _, in := range corpus {
			// A bounded wait per case: a read of a fifo or device that blocked would
			// show up here as a failure, never as a hung test.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := op.run(ctx, cl, e.ws.ID, in.path)
			hung := ctx.Err() != nil
			cancel()
			if hung {
				t.Fatalf("%s %s did not answer within 30s", op.name, in)
			}
			ok := e.judge(in, op.name, op.onLink, out, err)
			if ok {
				succeeded++
			} else {
				byCode[codeOf(err)]++
			}
			cases++
			e.settle(op.name+" "+in.String(), !ok)
		}
	}
	t.Logf("%d inputs x %d operations = %d cases: %d succeeded inside the root, refusals by code %v",
		len(corpus), len(hostileOps), cases, succeeded, byCode)
}

// A representative subset through the real CLI: refusals print `error: <code>: ...` and exit
// with the code's status; nothing outside changes. (NUL bytes cannot be passed in argv.)
func TestHostileCorpusCLI(t *testing.T) {
	e := newHostileEnv(t)
	var subset []hostileInput
	perCat := map[category]int{}
	for _, in := range e.corpus() {
		if strings.ContainsRune(in.path, 0) || perCat[in.cat] >= 6 {
			continue
		}
		perCat[in.cat]++
		subset = append(subset, in)
	}
	local := e.outsideFar + "/x" // an existing local file to upload: the CLI reads it, the runner must not
	ops := []struct {
		name   string
		onLink bool
		args   func(p string) []string
	}{
		{"ls", false, func(p string) []string { return []string{"ls", "--json", e.ws.ID, p} }},
		{"stat", true, func(p string) []string { return []string{"stat", "--json", e.ws.ID, p} }},
		{"get", false, func(p string) []string { return []string{"get", e.ws.ID, p} }},
		{"put", false, func(p string) []string { return []string{"put", e.ws.ID, local, p, "--replace"} }},
		{"mkdir", false, func(p string) []string { return []string{"mkdir", "-p", e.ws.ID, p} }},
		{"rm", true, func(p string) []string { return []string{"rm", "-r", e.ws.ID, p} }},
		{"mv", false, func(p string) []string { return []string{"mv", e.ws.ID, "mv-source.txt", p} }},
		{"chmod", false, func(p string) []string { return []string{"chmod", e.ws.ID, "0600", p} }},
	}
	cases := 0
	for _, op := range ops {
		for _, in := range subset {
			r := e.c.cli(t, nil, append([]string{"files"}, op.args(in.path)...)...)
			var err error
			if r.Code != 0 {
				line := strings.TrimSuffix(r.Stderr, "\n")
				code, _, ok := strings.Cut(strings.TrimPrefix(line, "error: "), ": ")
				if !strings.HasPrefix(line, "error: ") || !ok || strings.Contains(line, "\n") || protocol.Code(code).ExitCode() != r.Code {
					t.Errorf("files %s %s: exit %d with %q: want one `error: <code>: ` line and that code's status", op.name, in, r.Code, r.Stderr)
				}
				err = &protocol.Error{Code: protocol.Code(code), Message: line}
			}
			var out any = []byte(r.Stdout)
			if op.name == "stat" && err == nil {
				var fi protocol.FileInfo
				if jerr := json.Unmarshal([]byte(r.Stdout), &fi); jerr != nil {
					t.Errorf("stat --json %s: %v", in, jerr)
				}
				out = fi
			}
			ok := e.judge(in, "cli "+op.name, op.onLink, out, err)
			cases++
			e.settle("cli "+op.name+" "+in.String(), !ok)
		}
	}
	t.Logf("%d CLI cases (%d inputs x %d operations)", cases, len(subset), len(ops))
}

// Raw request paths, not escaped by the Go client: encoded separators and dots decode into the
// one path the guard then judges, and unencoded ".." segments are cleaned by the HTTP router
// into another URL (a redirect), never into a path that leaves the root.
func TestHostileRawURLs(t *testing.T) {
	e := newHostileEnv(t)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := e.c.Addr + "/v1/workspaces/" + e.ws.ID + "/files/"
	raw := []string{
		"%2e%2e%2fx", "%2E%2E/x", "..%2f..%2fetc%2fpasswd", "%2fetc%2fpasswd", "a%00b", "%2e%2e",
		"%2e%2e%2foutside%2fmarker.txt", "link-outside%2fmarker.txt", "link-root%2fetc%2fpasswd",
		"../../x", "..", "a/../../x", "/etc/passwd", "./../x", "%c0%ae%c0%ae%2fx", "dir%2f..%2f..%2fx",
		"link-parent/outside/marker.txt", "fifo", "dir%2F%2Finner.txt",
	}
	methods := []struct{ method, query string }{
		{"GET", ""}, {"GET", "?stat"}, {"GET", "?list"}, {"PUT", "?replace=true"}, {"DELETE", "?recursive=true"},
		{"POST", "?op=mkdir&parents=true"}, {"POST", "?op=chmod&mode=600"}, {"POST", "?op=rename&to=moved"},
	}
	for _, m := range methods {
		for _, p := range raw {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			req, err := http.NewRequestWithContext(ctx, m.method, base+p+m.query, strings.NewReader(putContent))
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			req.Header.Set("Authorization", protocol.Bearer(e.c.Token))
			resp, err := hc.Do(req)
			if err != nil {
				cancel()
				t.Fatalf("%s %s: %v", m.method, p, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			what := fmt.Sprintf("%s %s%s", m.method, p, m.query)
			if bytes.Contains(body, []byte(e.marker)) || bytes.Contains(body, []byte(canary)) {
				t.Errorf("%s: the answer holds outside content", what)
			}
			switch {
			case resp.StatusCode/100 == 3:
				// The router cleaned raw ".." segments: wherever it points, it is another
				// request that would meet the same guard.
			case resp.StatusCode/100 == 2:
				if decoded, err := url.PathUnescape(p); err != nil || escapesLexically(decoded) {
					t.Errorf("%s: succeeded with %s", what, body)
				}
			default:
				var eb struct{ Error protocol.Error }
				if json.Unmarshal(body, &eb) != nil || !slices.Contains(refusals, eb.Error.Code) {
					if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
						t.Errorf("%s: status %d, body %s: want a typed refusal", what, resp.StatusCode, body)
					}
				}
			}
			e.settle(what, resp.StatusCode/100 != 2)
		}
	}
}

// escapesLexically reports whether a decoded wire path is one the guard must refuse on sight.
func escapesLexically(p string) bool {
	if strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return true
	}
	return slices.Contains(strings.Split(p, "/"), "..") || slices.Contains(strings.Split(p, "/"), "")
}
