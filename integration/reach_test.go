package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/integration/devserver/pattern"
)

// Reaching a service in a sandbox, with real parts: the devserver in a Docker workspace on its
// private network, bound to 127.0.0.1 inside the container so nothing outside reaches it
// directly; the controller's proxy (operator token) and preview links (no token, path and host
// forms) reach it through the runner, for plain requests, a websocket, server-sent events and
// 256 MiB each way; Chromium renders a page whose script opens a websocket through a preview.

// buildDevserver builds integration/devserver into dir and returns its path.
func buildDevserver(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "devserver")
	cmd := exec.Command("go", "build", "-o", out, "./devserver")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the devserver: %v\n%s", err, b)
	}
	return out
}

// reachClient is an HTTP client for the test: no redirects followed, no proxy from the
// environment, and every host name dialed at 127.0.0.1 (a preview host {token}.localhost).
func reachClient(previewAddr string) *http.Client {
	d := &net.Dialer{}
	jar, _ := cookiejar.New(nil) // the preview host's cookie, as a browser keeps it
	return &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DisableCompression: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if h, _, _ := net.SplitHostPort(addr); strings.HasSuffix(h, ".localhost") {
				addr = previewAddr
			}
			return d.DialContext(ctx, network, addr)
		}},
	}
}

func reachGet(t *testing.T, hc *http.Client, u, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(b)
}

const bigBytes = 256 << 20

// checkDownload GETs /bytes?n=256MiB under base and checks it byte for byte, hashing as it
// streams.
func checkDownload(t *testing.T, hc *http.Client, base, token, want string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"bytes?n="+strconv.Itoa(bigBytes), nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || n != bigBytes || hex.EncodeToString(h.Sum(nil)) != want {
		t.Fatalf("256 MiB through %s: %s, %d bytes, %v; sha256 match %v", base, resp.Status, n, err, hex.EncodeToString(h.Sum(nil)) == want)
	}
	t.Logf("256 MiB through %s byte-exact in %s", base, time.Since(start).Round(time.Millisecond))
}

// patternReader yields n bytes of a pattern other than the devserver's.
type patternReader struct{ off, n int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), r.n-r.off)
	for j := range k {
		i := r.off + j
		p[j] = byte(i*13 + i/65521)
	}
	r.off += k
	return int(k), nil
}

func TestReachServiceInDocker(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli, serveOpts{extraArgs: []string{"--preview-listen", "127.0.0.1:0", "--preview-domain", "localhost"}})
	previewAddr := regexpFind(t, c, `tether previews on http://(\S+) `)
	hc := reachClient(previewAddr)
	ws := c.createOn(t, "docker")
	dev := buildDevserver(t, t.TempDir())
	c.mustCLI(t, "files", "put", ws.ID, dev, "devserver", "--mode", "0755")
	var web, other api.Service
	for _, s := range []struct {
		name string
		v    *api.Service
	}{{"web", &web}, {"other", &other}} {
		out := c.mustCLI(t, "service", "start", ws.ID, s.name, "--port", "auto", "--ready", "http:/health", "--json", "--", "./devserver")
		if err := json.Unmarshal([]byte(out), s.v); err != nil || s.v.State != "ready" {
			t.Fatalf("service start %s: %q %v", s.name, out, err)
		}
	}

	// Bound to the container's loopback: not reachable at the container's address.
	unreachableFromHost(t, cli, ws, web.Port)

	// The operator's proxy.
	proxy := strings.TrimSpace(c.mustCLI(t, "service", "endpoint", ws.ID, "web"))
	prefix := "/v1/workspaces/" + ws.ID + "/services/web/proxy"
	if proxy != c.Addr+prefix+"/" {
		t.Fatalf("service endpoint printed %q", proxy)
	}
	if resp, body := reachGet(t, hc, proxy+"headers?x=1", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the proxy without a token: %s %s", resp.Status, body)
	}
	resp, body := reachGet(t, hc, proxy+"headers?x=1", c.Token)
	var seen struct {
		Method, Path, Query, Host string
		Headers                   http.Header
	}
	if err := json.Unmarshal([]byte(body), &seen); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET headers through the proxy: %s %s %v", resp.Status, body, err)
	}
	ctlHost := strings.TrimPrefix(c.Addr, "http://")
	if seen.Path != "/headers" || seen.Query != "x=1" || seen.Headers.Get("X-Forwarded-Prefix") != prefix ||
		seen.Headers.Get("X-Forwarded-Host") != ctlHost || seen.Headers.Get("X-Forwarded-Proto") != "http" ||
		seen.Headers.Get("X-Forwarded-For") != "127.0.0.1" || seen.Headers.Get("Authorization") != "" ||
		seen.Host != "localhost:"+strconv.Itoa(web.Port) {
		t.Fatalf("the app saw %+v", seen)
	}
	if resp, _ := reachGet(t, hc, strings.TrimSuffix(proxy, "/"), c.Token); resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != prefix+"/" {
		t.Fatalf("/proxy without a slash: %s %s", resp.Status, resp.Header.Get("Location"))
	}

	// A websocket through the proxy.
	wsURL := "ws" + strings.TrimPrefix(proxy, "http") + "ws/echo"
	conn, wresp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Authorization": {"Bearer " + c.Token}})
	if err != nil {
		t.Fatalf("websocket through the proxy: %v (%v)", err, wresp)
	}
	for _, msg := range []string{"one", "two"} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, got, err := conn.ReadMessage(); err != nil || string(got) != "echo: "+msg {
			t.Fatalf("websocket echo of %q: %q %v", msg, got, err)
		}
	}
	conn.Close()

	// Server-sent events arrive one by one: the stream is 2000 events 50 ms apart (100 s), and
	// the first three are read long before it ends — a proxy that buffered would hold them.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxy+"sse?n=2000", nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	sresp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(sresp.Body)
	for i := 1; i <= 3; {
		if !sc.Scan() {
			t.Fatalf("SSE through the proxy ended before event %d: %v", i, sc.Err())
		}
		if line := sc.Text(); line != "" {
			if line != "data: tick "+strconv.Itoa(i) {
				t.Fatalf("SSE event %d: %q", i, line)
			}
			i++
		}
	}
	cancel()
	sresp.Body.Close()

	// 256 MiB down and 64 MiB up, byte-exact.
	want := pattern.SHA256(bigBytes)
	checkDownload(t, hc, proxy, c.Token, want)
	up := &patternReader{n: 64 << 20}
	h := sha256.New()
	_, _ = io.Copy(h, &patternReader{n: up.n})
	req, _ = http.NewRequest(http.MethodPost, proxy+"upload", up)
	req.ContentLength = up.n
	req.Header.Set("Authorization", "Bearer "+c.Token)
	uresp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Bytes  int64
		SHA256 string
	}
	err = json.NewDecoder(uresp.Body).Decode(&got)
	uresp.Body.Close()
	if err != nil || got.Bytes != up.n || got.SHA256 != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("upload through the proxy: %+v %v", got, err)
	}

	// A preview link: no token needed, in both forms.
	var pv api.Preview
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "url", ws.ID, "web", "--json")), &pv); err != nil {
		t.Fatal(err)
	}
	hostURL := strings.TrimSpace(c.mustCLI(t, "service", "url", ws.ID, "web"))
	entry, err := url.Parse(hostURL)
	if err != nil || !strings.HasPrefix(pv.PathURL, c.Addr+"/p/") || !strings.HasSuffix(entry.Host, ".localhost:"+portOf(t, previewAddr)) ||
		entry.Path != "/__tether/enter" || strings.Contains(entry.Host, strings.TrimSuffix(strings.TrimPrefix(pv.PathURL, c.Addr+"/p/"), "/")) {
		t.Fatalf("preview %+v, url %q: want the host form's entry, the secret in its query and not its host", pv, hostURL)
	}
	// The entry trades the secret for a cookie of that host and sends the browser to /.
	if resp, body := reachGet(t, hc, hostURL, ""); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("the host form's entry: %s %s", resp.Status, body)
	}
	hostBase := "http://" + entry.Host + "/"
	resp, body = reachGet(t, hc, pv.PathURL+"headers", "")
	seen.Headers = nil
	if err := json.Unmarshal([]byte(body), &seen); err != nil || resp.StatusCode != http.StatusOK || seen.Path != "/headers" ||
		seen.Headers.Get("X-Forwarded-Prefix") != strings.TrimSuffix(strings.TrimPrefix(pv.PathURL, c.Addr), "/") ||
		seen.Host != "localhost:"+strconv.Itoa(web.Port) {
		t.Fatalf("GET headers through the preview link: %s %s", resp.Status, body)
	}
	resp, body = reachGet(t, hc, hostBase+"headers", "")
	seen.Headers = nil
	if err := json.Unmarshal([]byte(body), &seen); err != nil || resp.StatusCode != http.StatusOK || seen.Path != "/headers" ||
		seen.Headers.Get("X-Forwarded-Prefix") != "" || seen.Host != "localhost:"+strconv.Itoa(web.Port) {
		t.Fatalf("GET headers through the preview host: %s %s", resp.Status, body)
	}
	checkDownload(t, hc, pv.PathURL, "", want)
	// The token is web's alone: it is no credential for the API, nor for other's proxy.
	token := strings.TrimSuffix(strings.TrimPrefix(pv.PathURL, c.Addr+"/p/"), "/")
	if resp, body := reachGet(t, hc, c.Addr+"/v1/workspaces/"+ws.ID+"/services/other/proxy/headers", token); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("web's preview token on other's proxy: %s %s", resp.Status, body)
	}

	t.Run("chromium", func(t *testing.T) {
		for _, u := range []string{pv.PathURL, hostURL} {
			if got := renderInChromium(t, u); got != "echo: hello from the page" {
				t.Fatalf("Chromium rendered %q at %s; want the websocket's echo", got, u)
			}
		}
	})

	// Revoked: refused (the page says so), both forms.
	if out := c.mustCLI(t, "service", "url", ws.ID, "web", "--revoke"); !strings.Contains(out, "revoked 2 preview link") {
		t.Fatalf("service url --revoke: %q", out)
	}
	for _, u := range []string{pv.PathURL, hostBase, hostURL} {
		if resp, body := reachGet(t, hc, u, ""); resp.StatusCode != http.StatusGone || !strings.Contains(body, "revoked") {
			t.Fatalf("a revoked link %s: %s %s", u, resp.Status, body)
		}
	}

	// Expired: a short link works, and is refused once its time is up. Its 20 s leave room for
	// a loaded machine between making it and the first request, which must get through.
	var shortLink api.Preview
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "url", ws.ID, "web", "--ttl", "20s", "--json")), &shortLink); err != nil {
		t.Fatal(err)
	}
	short := shortLink.PathURL
	if first, body := reachGet(t, hc, short+"health", ""); first.StatusCode != http.StatusOK {
		t.Fatalf("a 20 s link at first: %s %s", first.Status, body)
	}
	eventually(t, 90*time.Second, "the short link to expire", func() bool {
		resp, body := reachGet(t, hc, short+"health", "")
		return resp.StatusCode == http.StatusGone && strings.Contains(body, "expired")
	})

	// Bad input.
	for _, c2 := range []struct {
		args []string
		want string
	}{
		{[]string{"service", "url", ws.ID, "nosuch"}, "error: not_found:"},
		{[]string{"service", "endpoint", ws.ID, "nosuch"}, "error: not_found:"},
		{[]string{"service", "url", ws.ID, "web", "--ttl", "0s"}, "error: invalid_argument:"},
		{[]string{"service", "url", ws.ID, "web", "--ttl", "-1s"}, "error: invalid_argument:"},
		{[]string{"service", "url", ws.ID, "web", "--ttl", "1000h"}, "error: invalid_argument:"},
	} {
		if r := c.cli(t, nil, c2.args...); r.Code == 0 || !strings.Contains(r.Stderr, c2.want) {
			t.Errorf("tether %s: exit %d, stderr %q; want %q", strings.Join(c2.args, " "), r.Code, r.Stderr, c2.want)
		}
	}
	if resp, body := reachGet(t, hc, c.Addr+"/v1/workspaces/"+ws.ID+"/services/nosuch/proxy/", c.Token); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("the proxy of no service: %s %s", resp.Status, body)
	}

	// Stopped: the proxy is unavailable, its links revoked, and no new link is made.
	live := strings.TrimSpace(c.mustCLI(t, "service", "url", ws.ID, "web", "--json"))
	if err := json.Unmarshal([]byte(live), &pv); err != nil {
		t.Fatal(err)
	}
	c.mustCLI(t, "service", "stop", ws.ID, "web")
	if resp, body := reachGet(t, hc, proxy+"health", c.Token); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
		t.Fatalf("the proxy of a stopped service: %s %s", resp.Status, body)
	}
	if resp, body := reachGet(t, hc, pv.PathURL, ""); resp.StatusCode != http.StatusGone || !strings.Contains(body, "revoked") {
		t.Fatalf("a link of a stopped service: %s %s", resp.Status, body)
	}
	if r := c.cli(t, nil, "service", "url", ws.ID, "web"); r.Code == 0 || !strings.Contains(r.Stderr, "error: unavailable:") {
		t.Fatalf("service url of a stopped service: %+v", r)
	}
	c.mustCLI(t, "workspace", "rm", ws.ID)
}

// renderInChromium opens u in headless Chromium and returns the text of #ws once the page's
// websocket answered (or what it says when the wait ends).
func renderInChromium(t *testing.T, u string) string {
	t.Helper()
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("no %s (install Debian's chromium, .ci/deps chromium): %v", chromium, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("no-proxy-server", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Navigate(u))
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("ws") !== null && document.getElementById("ws").textContent.startsWith("echo:")`,
			chromedp.WithPollingTimeout(30*time.Second)))
	}
	var text string
	if err == nil {
		text, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("ws")))
	}
	if err != nil {
		seen, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
		t.Fatalf("Chromium at %s: %v; page: %s", u, err, seen)
	}
	return text
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// regexpFind waits for the controller's log to have a line matching re and returns its first
// group.
func regexpFind(t *testing.T, c *controllerProc, re string) string {
	t.Helper()
	var m []string
	eventually(t, 10*time.Second, "the controller's log to match "+re, func() bool {
		m = regexp.MustCompile(re).FindStringSubmatch(c.log.String())
		return m != nil
	})
	return m[1]
}
