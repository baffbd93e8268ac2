package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// The web console in Debian's Chromium against a real controller and a real workspace: sign
// in, the list, a workspace's page, the Files panel on the live workspace, then closed (Saved
// copy with its save time, the same bytes), reopened and rewritten (Live again, the new bytes),
// with its runner gone (unavailable, never the old save); a run's live output, and a close
// refused while it runs, shown as refused.

// consoleUI drives one Chromium tab.
type consoleUI struct {
	t         *testing.T
	ctx       context.Context
	downloads string
	shots     string // TETHER_CONSOLE_SCREENSHOTS: where the README's screenshots go
}

func startConsoleUI(t *testing.T) *consoleUI {
	t.Helper()
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("no %s (install Debian's chromium, .ci/deps chromium): %v", chromium, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("no-proxy-server", true), chromedp.WindowSize(1280, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 10*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	ui := &consoleUI{t: t, ctx: ctx, downloads: t.TempDir(), shots: os.Getenv("TETHER_CONSOLE_SCREENSHOTS")}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: ui.downloads, EventsEnabled: ptrTo(true)})
		return err
	})); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ui
}

func ptrTo[T any](v T) *T { return &v }

// fail saves a screenshot of the page (TETHER_SCREENSHOT_DIR, or a directory kept for it),
// logs where and what the page says, and fails the test.
func (ui *consoleUI) fail(format string, args ...any) {
	ui.t.Helper()
	dir := os.Getenv("TETHER_SCREENSHOT_DIR")
	if dir == "" {
		dir, _ = os.MkdirTemp("", "tether-console-failure-")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ui.ctx), 20*time.Second)
	defer cancel()
	if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
		p := filepath.Join(dir, strings.NewReplacer("/", "_").Replace(ui.t.Name())+".png")
		if err := os.WriteFile(p, png, 0o644); err == nil {
			ui.t.Logf("screenshot of the failure: %s", p)
		}
	}
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	ui.t.Fatalf("%s\npage text:\n%s", fmt.Sprintf(format, args...), text)
}

func (ui *consoleUI) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	ui.t.Helper()
	if err := chromedp.Do(ui.ctx, actions...); err != nil {
		ui.fail("%s: %v", what, err)
	}
}

// wait polls a JavaScript condition until it holds (a bound on liveness, not a timing check).
func (ui *consoleUI) wait(what, cond string) {
	ui.t.Helper()
	if _, err := chromedp.Run(ui.ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(90*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		ui.fail("waiting for %s (%s): %v", what, cond, err)
	}
}

// text is the text content of the first element sel matches ("" when none does).
func (ui *consoleUI) text(sel string) string {
	ui.t.Helper()
	s, err := chromedp.Run(ui.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {textContent: ""}).textContent`, strconv.Quote(sel))))
	if err != nil {
		ui.fail("read %s: %v", sel, err)
	}
	return s
}

// textIs is a condition: sel's text content is want.
func textIs(sel, want string) string {
	return fmt.Sprintf(`(document.querySelector(%s) || {}).textContent === %s`, strconv.Quote(sel), strconv.Quote(want))
}

func textHas(sel, want string) string {
	return fmt.Sprintf(`((document.querySelector(%s) || {}).textContent || "").includes(%s)`, strconv.Quote(sel), strconv.Quote(want))
}

// click waits for sel to be visible and enabled and clicks it as a user would.
func (ui *consoleUI) click(sel string) {
	ui.t.Helper()
	ui.wait(sel+" to be there", fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && !e.disabled; })()`, strconv.Quote(sel)))
	ui.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// download clicks sel and returns the bytes of the file Chromium saved.
func (ui *consoleUI) download(sel string) []byte {
	ui.t.Helper()
	ctx, cancel := context.WithTimeout(ui.ctx, 90*time.Second)
	defer cancel()
	progress := chromedp.Events(ctx, browser.DownloadProgress)
	ui.click(sel)
	for ev, err := range progress {
		if err != nil {
			ui.fail("download by %s: %v", sel, err)
		}
		switch ev.State {
		case browser.DownloadProgressStateCompleted:
			b, err := os.ReadFile(filepath.Join(ui.downloads, ev.GUID))
			if err != nil {
				ui.fail("the download by %s: %v", sel, err)
			}
			return b
		case browser.DownloadProgressStateCanceled:
			ui.fail("the download by %s was canceled", sel)
		}
	}
	ui.fail("no download by %s", sel)
	return nil
}

// shot writes a screenshot the README shows when TETHER_CONSOLE_SCREENSHOTS names a directory:
// of the viewport, or of one element.
func (ui *consoleUI) shot(name, sel string) {
	ui.t.Helper()
	if ui.shots == "" {
		return
	}
	var png []byte
	var err error
	if sel == "" {
		png, err = chromedp.Run(ui.ctx, chromedp.CaptureScreenshot())
	} else {
		png, err = chromedp.Run(ui.ctx, chromedp.Screenshot(chromedp.CSS(sel), chromedp.NodeVisible))
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(ui.shots, name), png, 0o644)
	}
	if err != nil {
		ui.fail("screenshot %s: %v", name, err)
	}
	ui.t.Logf("screenshot %s", filepath.Join(ui.shots, name))
}

func tinyPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{uint8(40 + x*4), uint8(90 + y*3), 200, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// savedAtLabel is the label the console shows for the saved copy the API serves now.
func savedAtLabel(t *testing.T, c *controllerProc, ws string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", c.Addr+"/v1/workspaces/"+ws+"/files/?list", nil)
	req.Header.Set("Authorization", protocol.Bearer(c.Token))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page protocol.FsListResult
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || page.Source != protocol.SourceSaved || page.SavedAt == nil {
		t.Fatalf("the saved copy's listing: %s %+v %v", resp.Status, page, err)
	}
	return "Saved copy · saved at " + page.SavedAt.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

func TestConsoleInChromium(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "console-demo")
	c.createWorkspace(t, "--name", "another")
	notes := []byte("hello from the console test\n<b>not bold</b><script>alert(1)</script>\n")
	data := make([]byte, 300<<10)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(ws.Root, "notes.txt"), notes, 0o644)
	mustWrite(t, filepath.Join(ws.Root, "src", "data.bin"), data, 0o644)
	mustWrite(t, filepath.Join(ws.Root, "src", "logo.png"), tinyPNG(t, 48, 32), 0o644)
	mustWrite(t, filepath.Join(ws.Root, "README.md"), []byte("# console demo\n"), 0o644)
	r := c.cli(t, nil, "exec", "--detach", ws.ID, "--", "sh", "-c", "echo hello-from-run; while [ ! -e go-on ]; do sleep 0.05; done; echo bye-from-run")
	runID := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || !strings.HasPrefix(runID, "run_") {
		t.Fatalf("exec --detach: %+v", r)
	}

	ui := startConsoleUI(t)

	// Sign in: a wrong token is refused as the API refuses it, the operator's is taken.
	ui.do("open /ui", chromedp.Navigate(c.Addr+"/ui"))
	ui.wait("the sign-in form", `!!document.querySelector("#token")`)
	ui.do("type a wrong token", chromedp.SetValue(chromedp.ID("token"), "tot_wrong"))
	ui.click("#signin-btn")
	ui.wait("the refusal", textHas("#signin-error", "error: unauthorized: "))
	ui.do("type the token", chromedp.SetValue(chromedp.ID("token"), c.Token))
	ui.click("#signin-btn")

	// The list.
	ui.wait("the list", `document.querySelector("#main").dataset.listLoaded === "true"`)
	row := fmt.Sprintf(`tr[data-ws=%q]`, ws.ID)
	for _, want := range []string{"console-demo", ws.ID, "ready", "local", "yes"} {
		if !strings.Contains(ui.text(row), want) {
			ui.fail("the list's row of %s lacks %q: %q", ws.ID, want, ui.text(row))
		}
	}
	if !strings.Contains(ui.text("#workspaces"), "another") || !strings.Contains(ui.text("#who"), "operator") {
		ui.fail("the list: %q, %q", ui.text("#workspaces"), ui.text("#who"))
	}
	if iso := c.showWorkspace(t, ws.ID).AllocationInfo["isolation"]; iso == "" || !strings.Contains(ui.text(row), iso) {
		ui.fail("the list's row of %s lacks its isolation %q: %q", ws.ID, iso, ui.text(row))
	}

	// The workspace's page, its files live.
	ui.click(row + " a")
	ui.wait("the workspace page", textHas("#ws-title", "console-demo"))
	ui.wait("the live label", textIs("#files-label", "Live workspace"))
	ui.wait("the listing", `!!document.querySelector('#files-list [data-path="notes.txt"]')`)
	ui.click(`#files-list [data-path="notes.txt"]`)
	ui.wait("the preview", textIs("#preview-text", string(notes)))
	if n := ui.text("#files-preview b, #files-preview script"); n != "" {
		ui.fail("the preview made elements of the file's text: %q", n)
	}
	ui.click(`#files-list [data-path="src"]`)
	ui.wait("the src listing", `!!document.querySelector('#files-list [data-path="src/logo.png"]')`)
	ui.click(`#files-list [data-path="src/logo.png"]`)
	ui.wait("the image preview", `(document.querySelector("#preview-image") || {}).naturalWidth === 48`)
	if got := ui.download(`#files-list button.download[data-path="src/data.bin"]`); !bytes.Equal(got, data) {
		ui.fail("the live download: %d bytes, want the %d written", len(got), len(data))
	}
	ui.wait("the download's source", textHas("#download-msg", "from Live workspace"))

	// The run's output, followed live.
	ui.click(fmt.Sprintf(`button.run-output[data-run=%q]`, runID))
	ui.wait("the run's output", textHas("#run-output", "hello-from-run"))
	ui.shot("console-workspace.png", "")
	ui.do("scroll to the files", chromedp.ScrollIntoView(chromedp.ID("files")))
	ui.shot("console-files-live.png", "#files")

	// A close while the run is active is refused, and shown as refused.
	ui.click("#close-btn")
	ui.wait("the refusal", textHas("#action-refused", "Close refused: error: conflict: "))
	if !strings.Contains(ui.text("#action-refused"), "active run") || ui.text("#ws-state") != "ready" {
		ui.fail("the refusal: %q, state %q", ui.text("#action-refused"), ui.text("#ws-state"))
	}
	if got := c.showWorkspace(t, ws.ID); got.State != api.StateReady {
		t.Fatalf("a refused close changed the workspace: %+v", got)
	}
	mustWrite(t, filepath.Join(ws.Root, "go-on"), nil, 0o644)
	ui.wait("the run's end, live", textHas("#run-output", "bye-from-run"))
	ui.wait("the run's exit", textHas("#run-status", "Finished: exit 0"))

	// Closed: the saved copy, labelled with its save time, and the same bytes.
	ui.click("#close-btn")
	ui.wait("the closed workspace", textIs("#ws-state", "closed")+` && !!document.querySelector("#action-done")`)
	want := savedAtLabel(t, c, ws.ID)
	ui.wait("the saved label", textIs("#files-label", want))
	ui.click(`#files-list [data-path="notes.txt"]`)
	ui.wait("the saved preview", textIs("#preview-text", string(notes)))
	if got := ui.text("#preview-source"); got != "("+want+")" {
		ui.fail("the saved preview's source: %q, want %q", got, want)
	}
	ui.click(`#files-list [data-path="src"]`)
	ui.wait("the saved src listing", `!!document.querySelector('#files-list [data-path="src/data.bin"]')`)
	if got := ui.download(`#files-list button.download[data-path="src/data.bin"]`); !bytes.Equal(got, data) {
		ui.fail("the saved download: %d bytes, want the %d saved", len(got), len(data))
	}
	ui.wait("the saved download's source", textHas("#download-msg", "from "+want))
	ui.do("scroll to the files", chromedp.ScrollIntoView(chromedp.ID("files")))
	ui.shot("console-files-saved.png", "#files")

	// The list shows it closed, with its last save; back to its page.
	ui.do("go to the list", chromedp.Evaluate[chromedp.Void](`location.hash = "#/"`))
	ui.wait("the list again", `document.querySelector("#main").dataset.listLoaded === "true"`)
	if !strings.Contains(ui.text(row), "closed") || !strings.Contains(ui.text(row+" td.last-save"), strings.TrimPrefix(want, "Saved copy · saved at ")) {
		ui.fail("the list's row of the closed workspace: %q", ui.text(row))
	}
	ui.shot("console-workspaces.png", "")
	ui.click(row + " a")
	ui.wait("the closed workspace's page", textIs("#ws-state", "closed")+` && `+textIs("#files-label", want))

	// Reopened and rewritten: Live again, with the new bytes.
	ui.click("#reopen-btn")
	ui.wait("the reopened workspace", textIs("#ws-state", "ready")+` && !!document.querySelector("#action-done")`)
	ui.wait("the live label again", textIs("#files-label", "Live workspace"))
	ws = c.showWorkspace(t, ws.ID)
	rewritten := []byte("rewritten after the reopen\n")
	mustWrite(t, filepath.Join(ws.Root, "notes.txt"), rewritten, 0o644)
	ui.click("#files-refresh")
	ui.wait("the refreshed listing", `!!document.querySelector('#files-list [data-path="notes.txt"]')`)
	ui.click(`#files-list [data-path="notes.txt"]`)
	ui.wait("the rewritten preview", textIs("#preview-text", string(rewritten)))
	if ui.text("#files-label") != "Live workspace" {
		ui.fail("the label after the rewrite: %q", ui.text("#files-label"))
	}

	// Its runner gone with unsaved work: unavailable, never the old save as current.
	if err := syscall.Kill(c.runnerPID(t, ws), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the controller to see the runner gone", func() bool { return !c.showWorkspace(t, ws.ID).Connected })
	ui.click("#files-refresh")
	ui.wait("the unavailable label", textIs("#files-label", "unavailable")+` && `+textHas("#files-error", "error: unavailable: "))
	if ui.text("#files-list") != "" {
		ui.fail("files listed while unavailable: %q", ui.text("#files-list"))
	}

	// Signing out ends the session: the page asks for a token again.
	ui.click("#signout")
	ui.wait("the sign-in form again", `!!document.querySelector("#token")`)
}
