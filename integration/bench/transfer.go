package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/client"
)

const (
	// b64Chunk is the chunk agent platforms move over exec today: 192 KiB, 256 KiB of base64.
	b64Chunk = 192 << 10
	// Workspace files (relative to the workspace root, which is also exec's working directory);
	// they go with the workspace.
	wsFile    = "bench-file.bin"
	wsB64File = "bench-b64.bin"
	// roundBudget: once a measurement's rounds took this long, no further round starts.
	roundBudget = 90 * time.Second
	rssEvery    = 20 * time.Millisecond
)

// hostFile is a generated file on the host and what it must hash to.
type hostFile struct {
	path string
	size int64
	sha  string
}

// genFile writes size pseudo-random bytes (ChaCha8, fixed seed) to path: incompressible, and
// cheap to make.
func genFile(path string, size int64, seed byte) (hostFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return hostFile{}, err
	}
	var s [32]byte
	s[0] = seed
	src := rand.NewChaCha8(s)
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		p := buf[:min(left, int64(len(buf)))]
		_, _ = src.Read(p)
		h.Write(p)
		if _, err := f.Write(p); err != nil {
			f.Close()
			return hostFile{}, err
		}
		left -= int64(len(p))
	}
	if err := f.Close(); err != nil {
		return hostFile{}, err
	}
	return hostFile{path: path, size: size, sha: hex.EncodeToString(h.Sum(nil))}, nil
}

// rates is one measurement's MiB/s per round, and how many rounds were asked for.
type rates struct {
	mibps []float64
	asked int
}

// label says what the reported figure is a median of, and why rounds were cut short.
func (r rates) label() string {
	s := fmt.Sprintf("median of %d", len(r.mibps))
	if len(r.mibps) < r.asked {
		s += fmt.Sprintf(" (of %d asked: stopped after %s)", r.asked, roundBudget)
	}
	return s
}

// timedRounds runs fn up to n times; fn moves size bytes and returns the time the transfer
// itself took (set-up and verification untimed). No round starts once roundBudget has passed.
func timedRounds(ctx context.Context, n int, size int64, fn func() (time.Duration, error)) (rates, error) {
	r := rates{asked: n}
	start := time.Now()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if i > 0 && time.Since(start) > roundBudget {
			break
		}
		took, err := fn()
		if err != nil {
			return r, fmt.Errorf("round %d: %w", i+1, err)
		}
		r.mibps = append(r.mibps, float64(size)/(1<<20)/took.Seconds())
	}
	return r, nil
}

func timed(fn func() error) (time.Duration, error) {
	start := time.Now()
	err := fn()
	return time.Since(start), err
}

// files measures file get and put through the Go client against the host's read ceiling and
// against base64-over-exec, with runner and controller RSS watched during tether's transfers.
func (b *bench) files(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "tether-bench-files-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fileMiB, b64MiB := b.cfg.fileSize>>20, b.cfg.b64Size>>20
	progress("files: generating %d MiB and %d MiB files in %s", fileMiB, b64MiB, dir)
	big, err := genFile(filepath.Join(dir, "file.bin"), b.cfg.fileSize, 1)
	if err != nil {
		return fmt.Errorf("generate host file: %w", err)
	}
	small, err := genFile(filepath.Join(dir, "b64.bin"), b.cfg.b64Size, 2)
	if err != nil {
		return fmt.Errorf("generate host file: %w", err)
	}
	n := b.cfg.rounds

	progress("files: `cat` of the %d MiB host file > /dev/null (1 warm-up read, then %d rounds)", fileMiB, n)
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer devNull.Close()
	catOnce := func() error {
		cmd := exec.CommandContext(ctx, "cat", big.path)
		cmd.Stdout = devNull
		return cmd.Run()
	}
	if err := catOnce(); err != nil {
		return fmt.Errorf("cat warm-up: %w", err)
	}
	cat, err := timedRounds(ctx, n, big.size, func() (time.Duration, error) { return timed(catOnce) })
	if err != nil {
		return fmt.Errorf("cat: %w", err)
	}

	// A fresh controller and workspace: the earlier rows leave the shared controller holding
	// memory the Go runtime returns only gradually, which would hide what a transfer adds.
	progress("files: starting a fresh controller and workspace for the file rows")
	ft, err := startController(ctx, b.cfg.binDir)
	if err != nil {
		return err
	}
	defer ft.close()
	ws, _, err := ft.createWorkspace(ctx, "bench-files")
	if err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	runnerPID, err := ft.runnerPID(ws)
	if err != nil {
		return fmt.Errorf("runner pid: %w", err)
	}
	fw := fileWorkspace{t: ft, id: ws.ID}
	procs := []proc{{"tether-runner", runnerPID}, {"controller (`tether serve`)", ft.cmd.Process.Pid}}
	progress("files: put %d × %d MiB through the Go client WriteFile", n, fileMiB)
	putWatch := watchRSS(procs)
	put, err := timedRounds(ctx, n, big.size, func() (time.Duration, error) { return fw.put(ctx, big) })
	putWatch.end()
	if err != nil {
		return fmt.Errorf("file put (WriteFile %s, %d bytes): %w", wsFile, big.size, err)
	}
	progress("files: get %d × %d MiB through the Go client ReadFile", n, fileMiB)
	getWatch := watchRSS(procs)
	get, err := timedRounds(ctx, n, big.size, func() (time.Duration, error) { return fw.get(ctx, big) })
	getWatch.end()
	if err != nil {
		return fmt.Errorf("file get (ReadFile %s, %d bytes): %w", wsFile, big.size, err)
	}

	chunks := (small.size + b64Chunk - 1) / b64Chunk
	progress("files: base64 put over exec, %d × %d MiB in %d chunks of 192 KiB", n, b64MiB, chunks)
	b64Put, err := timedRounds(ctx, n, small.size, func() (time.Duration, error) { return fw.b64Put(ctx, small) })
	if err != nil {
		return fmt.Errorf("base64 put: %w", err)
	}
	progress("files: base64 get over exec, %d × %d MiB in %d chunks of 192 KiB", n, b64MiB, chunks)
	b64Get, err := timedRounds(ctx, n, small.size, func() (time.Duration, error) { return fw.b64Get(ctx, small) })
	if err != nil {
		return fmt.Errorf("base64 get: %w", err)
	}

	httpPut, httpGet, httpNote := httpRefRounds(ctx, dir, big, n)

	catTool := fmt.Sprintf("local read ceiling: `cat FILE > /dev/null` of the same %d MiB file on the host, page cache warm, %s", fileMiB, cat.label())
	b64Tool := func(op string, r rates) string {
		how := "Exec `sh -c 'dd if=FILE bs=196608 skip=N count=1 2>/dev/null | base64 -w0'` per chunk, decoded on the client"
		if op == "put" {
			how = "Exec `sh -c 'base64 -d >> FILE'` per chunk, base64 text on stdin"
		}
		return fmt.Sprintf("base64 over exec in 192 KiB chunks (today's agent platforms), Go client %s, %d MiB file (%d execs), %s",
			how, b64MiB, chunks, r.label())
	}
	httpTool := func(op string, r rates) string {
		how := "`curl URL | sha256sum`"
		if op == "put" {
			how = "`curl -T FILE URL`, the server fsyncs before it answers"
		}
		return fmt.Sprintf("a plain Go HTTP server on 127.0.0.1 (integration/bench/httpref.go), %s, %s", how, r.label())
	}
	if httpNote == "" {
		for _, row := range []struct {
			op   string
			t, r rates
			tool string
		}{{"get", get, httpGet, "Go client ReadFile into a count+SHA-256 writer"}, {"put", put, httpPut, "Go client WriteFile from the host file (fsynced), returned SHA-256 checked"}} {
			b.rep.add(result{Metric: fmt.Sprintf("%d MiB file %s through controller→runner, %s", fileMiB, row.op, row.t.label()),
				Unit: unitMiBps, Tether: val(median(row.t.mibps)), TetherTool: row.tool, N: len(row.t.mibps),
				Reference: val(median(row.r.mibps)), ReferenceTool: httpTool(row.op, row.r), RefN: len(row.r.mibps)})
		}
	} else {
		b.rep.note("File HTTP reference rows are n/a: %s", httpNote)
	}
	for _, row := range []struct {
		op        string
		t, r      rates
		tool, ref string
	}{
		{"get", get, cat, "Go client ReadFile into a count+SHA-256 writer", catTool},
		{"get", get, b64Get, "Go client ReadFile into a count+SHA-256 writer", b64Tool("get", b64Get)},
		{"put", put, cat, "Go client WriteFile from the host file, returned SHA-256 checked", catTool},
		{"put", put, b64Put, "Go client WriteFile from the host file, returned SHA-256 checked", b64Tool("put", b64Put)},
	} {
		b.rep.add(result{Metric: fmt.Sprintf("%d MiB file %s through controller→runner, %s", fileMiB, row.op, row.t.label()),
			Unit: unitMiBps, Tether: val(median(row.t.mibps)), TetherTool: row.tool, N: len(row.t.mibps),
			Reference: val(median(row.r.mibps)), ReferenceTool: row.ref, RefN: len(row.r.mibps)})
	}
	for _, w := range []struct {
		op string
		w  *rssWatch
		r  rates
	}{{"get", getWatch, get}, {"put", putWatch, put}} {
		b.rssRows(fmt.Sprintf("%d MiB file %s (%d rounds)", fileMiB, w.op, len(w.r.mibps)), w.w)
	}
	b.rep.note("File rows: the host file is pseudo-random (incompressible); drop_caches is not possible here, so the host file is read once untimed to warm the page cache and every read (cat, the runner's, dd's) comes from memory. WriteFile is durable (the runner fsyncs before publishing atomically); `base64 -d >> FILE` is not. ReadFile hashes on the client to verify, and the bench hashes again to check; both are in the timing.")
	b.rep.note("RSS rows: VmRSS of each process sampled every %s in a goroutine across all rounds of the transfer, plus its VmHWM after resetting it (clear_refs) just before; tether = the peak, reference = VmRSS just before the first round; the note gives the increase. The file rows run on a fresh controller and workspace, put first then get, so the baselines do not carry memory the earlier rows left behind (the Go runtime returns freed pages to the OS only gradually).", rssEvery)
	return nil
}

// httpRefRounds times put and get of f against the plain HTTP reference; the note says why
// they are n/a, or is "".
func httpRefRounds(ctx context.Context, dir string, f hostFile, n int) (put, get rates, note string) {
	if _, err := exec.LookPath("curl"); err != nil {
		return put, get, "no curl"
	}
	refDir := filepath.Join(dir, "httpref")
	if err := os.Mkdir(refDir, 0o755); err != nil {
		return put, get, err.Error()
	}
	h, err := startHTTPRef(refDir)
	if err != nil {
		return put, get, err.Error()
	}
	defer h.close()
	progress("files: reference put %d × `curl -T` to a plain Go HTTP server that fsyncs", n)
	if put, err = timedRounds(ctx, n, f.size, func() (time.Duration, error) { return h.put(ctx, f) }); err != nil {
		return put, get, err.Error()
	}
	progress("files: reference get %d × `curl | sha256sum` from it", n)
	if get, err = timedRounds(ctx, n, f.size, func() (time.Duration, error) { return h.get(ctx, f) }); err != nil {
		return put, get, err.Error()
	}
	return put, get, ""
}

// fileWorkspace is where the file rows run.
type fileWorkspace struct {
	t  *tetherEnv
	id string
}

// put writes the host file into the workspace through the Go client.
func (fw fileWorkspace) put(ctx context.Context, f hostFile) (time.Duration, error) {
	in, err := os.Open(f.path)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	start := time.Now()
	res, err := fw.t.cl.WriteFile(ctx, fw.id, wsFile, in, client.WriteOptions{Replace: true, Size: f.size, SHA256: f.sha})
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if res.Bytes != f.size || res.SHA256 != f.sha {
		return 0, fmt.Errorf("runner wrote %d bytes with sha256 %s; sent %d bytes with sha256 %s", res.Bytes, res.SHA256, f.size, f.sha)
	}
	return took, nil
}

// get reads the workspace file back through the Go client into a counting SHA-256 writer.
func (fw fileWorkspace) get(ctx context.Context, f hostFile) (time.Duration, error) {
	w := newHashCounter()
	start := time.Now()
	_, err := fw.t.cl.ReadFile(ctx, fw.id, wsFile, w, client.ReadOptions{})
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if w.n != f.size || w.sum() != f.sha {
		return 0, fmt.Errorf("got %d bytes with sha256 %s, want %d bytes with sha256 %s", w.n, w.sum(), f.size, f.sha)
	}
	return took, nil
}

// b64Put appends the host file to the workspace file one 192 KiB chunk per exec of
// `base64 -d >> FILE`, then checks the result with sha256sum (untimed, as is removing the
// previous round's file).
func (fw fileWorkspace) b64Put(ctx context.Context, f hostFile) (time.Duration, error) {
	if err := fw.t.exec(ctx, fw.id, io.Discard, "rm", "-f", wsB64File); err != nil {
		return 0, err
	}
	in, err := os.Open(f.path)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	buf := make([]byte, b64Chunk)
	enc := make([]byte, base64.StdEncoding.EncodedLen(b64Chunk))
	took, err := timed(func() error {
		for {
			n, err := io.ReadFull(in, buf)
			if n > 0 {
				m := base64.StdEncoding.EncodedLen(n)
				base64.StdEncoding.Encode(enc, buf[:n])
				if err := fw.t.execIO(ctx, fw.id, bytes.NewReader(enc[:m]), io.Discard, "sh", "-c", "base64 -d >> "+wsB64File); err != nil {
					return err
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
	if err != nil {
		return 0, err
	}
	var out bytes.Buffer
	if err := fw.t.exec(ctx, fw.id, &out, "sha256sum", wsB64File); err != nil {
		return 0, err
	}
	if got, _, _ := strings.Cut(out.String(), " "); got != f.sha {
		return 0, fmt.Errorf("%s in the workspace has sha256 %s, want %s", wsB64File, got, f.sha)
	}
	return took, nil
}

// b64Get reads the workspace file one 192 KiB chunk per exec of `dd ... | base64 -w0`, decodes
// each on the client and checks count and SHA-256 of the whole.
func (fw fileWorkspace) b64Get(ctx context.Context, f hostFile) (time.Duration, error) {
	w := newHashCounter()
	dec := make([]byte, b64Chunk)
	var out bytes.Buffer
	took, err := timed(func() error {
		for n := int64(0); n*b64Chunk < f.size; n++ {
			out.Reset()
			script := fmt.Sprintf("dd if=%s bs=%d skip=%d count=1 2>/dev/null | base64 -w0", wsB64File, b64Chunk, n)
			if err := fw.t.exec(ctx, fw.id, &out, "sh", "-c", script); err != nil {
				return err
			}
			m, err := base64.StdEncoding.Decode(dec, out.Bytes())
			if err != nil {
				return fmt.Errorf("chunk %d: %w", n, err)
			}
			w.Write(dec[:m])
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if w.n != f.size || w.sum() != f.sha {
		return 0, fmt.Errorf("got %d bytes with sha256 %s, want %d bytes with sha256 %s", w.n, w.sum(), f.size, f.sha)
	}
	return took, nil
}

// proc is a process whose memory is watched.
type proc struct {
	name string
	pid  int
}

// rssWatch samples the VmRSS of some processes every rssEvery until end.
type rssWatch struct {
	procs      []proc
	idle, peak []float64
	hwmReset   []bool // VmHWM was reset before, so it bounds the peak between samples too
	samples    int
	errs       []string
	stop, done chan struct{}
}

func watchRSS(procs []proc) *rssWatch {
	w := &rssWatch{procs: procs, idle: make([]float64, len(procs)), peak: make([]float64, len(procs)),
		hwmReset: make([]bool, len(procs)), stop: make(chan struct{}), done: make(chan struct{})}
	for i, p := range procs {
		// Writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS.
		w.hwmReset[i] = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0) == nil
		rss, err := vmRSS(p.pid)
		if err != nil {
			w.errs = append(w.errs, fmt.Sprintf("%s: %v", p.name, err))
		}
		w.idle[i], w.peak[i] = rss, rss
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(rssEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				w.sample()
			}
		}
	}()
	return w
}

// sample is called by the sampling goroutine, then once more by end after it stopped.
func (w *rssWatch) sample() {
	w.samples++
	for i, p := range w.procs {
		if rss, err := vmRSS(p.pid); err == nil {
			w.peak[i] = max(w.peak[i], rss)
		}
	}
}

// end stops sampling and folds in a last sample and each reset VmHWM.
func (w *rssWatch) end() {
	close(w.stop)
	<-w.done
	w.sample()
	for i, p := range w.procs {
		if !w.hwmReset[i] {
			continue
		}
		if v, err := procStatus(p.pid, "VmHWM"); err == nil {
			var kb int64
			if _, err := fmt.Sscanf(v, "%d kB", &kb); err == nil {
				w.peak[i] = max(w.peak[i], float64(kb*1024))
			}
		}
	}
}

func (b *bench) rssRows(what string, w *rssWatch) {
	for _, e := range w.errs {
		b.rep.note("RSS during %s: %s", what, e)
	}
	for i, p := range w.procs {
		how := fmt.Sprintf("%d samples every %s", w.samples, rssEvery)
		if w.hwmReset[i] {
			how += " + VmHWM"
		} else {
			how += "; VmHWM could not be reset, samples only"
		}
		b.rep.add(result{Metric: "peak RSS during the " + what, Unit: unitBytes, Tether: val(w.peak[i]),
			TetherTool: fmt.Sprintf("%s VmRSS (%s)", p.name, how), Reference: val(w.idle[i]),
			ReferenceTool: "same process, VmRSS just before",
			Note:          fmt.Sprintf("increase %+.2f MiB", (w.peak[i]-w.idle[i])/(1<<20))})
	}
}
