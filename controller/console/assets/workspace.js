// A workspace's page: what it is and holds (state, lease, usage), whether it may close, its
// events, runs with their output, services, snapshots and files.

import { el, clear, request, getJSON, postJSON, enc, fmtTime, fmtBytes, stateBadge, errorBox, readFrames, appendCapped } from "./lib.js";
import { FilesPanel } from "./files.js";

const CH_STDOUT = 1, CH_STDERR = 2, CH_ERROR = 6, CH_GAP = 7, CH_END = 8;

function optional(promise) { return promise.catch((err) => ({ error: err })); }

function usageText(u) {
  if (!u) return "—";
  const parts = [];
  if (u.cpu_percent !== undefined) parts.push(`CPU ${Number(u.cpu_percent).toFixed(1)}%`);
  if (u.memory_bytes !== undefined) parts.push(`memory ${fmtBytes(u.memory_bytes)}`);
  if (u.disk_bytes !== undefined) parts.push(`disk ${fmtBytes(u.disk_bytes)}`);
  if (u.sampled_at) parts.push(`sampled ${fmtTime(u.sampled_at)}`);
  return parts.length ? parts.join(", ") : "—";
}

export class WorkspacePage {
  constructor(main, id) {
    this.main = main;
    this.id = id;
    this.aborts = [];
  }

  // leave stops the page's streams (a run's followed output).
  leave() { for (const a of this.aborts) a.abort(); this.aborts = []; }

  base() { return `/v1/workspaces/${enc(this.id)}`; }

  async render(message) {
    this.leave();
    clear(this.main, el("p", { class: "muted" }, "Loading…"));
    let ws;
    try {
      ws = await getJSON(this.base());
    } catch (err) {
      clear(this.main, el("h1", {}, "Workspace"), errorBox(err, "ws-error"));
      return;
    }
    this.ws = ws;
    const [lease, snaps, events, runs, services, check] = await Promise.all([
      optional(getJSON(`${this.base()}/lease`)),
      optional(getJSON(`${this.base()}/snapshots`)),
      optional(getJSON(`${this.base()}/events`)),
      optional(getJSON(`${this.base()}/runs`)),
      ws.connected ? optional(getJSON(`${this.base()}/services`)) : Promise.resolve([]),
      ws.state === "ready" ? optional(postJSON(`${this.base()}/close`, { check: true })) : Promise.resolve(null),
    ]);
    const lastSave = Array.isArray(snaps) && snaps.length ? snaps.map((s) => s.created_at).sort().pop() : null;
    const info = ws.allocation_info || {};
    const facts = el("dl", { class: "facts", id: "ws-facts" },
      el("dt", {}, "State"), el("dd", { id: "ws-state" }, stateBadge(ws.state), ws.reason ? ` ${ws.reason}` : ""),
      el("dt", {}, "ID"), el("dd", {}, ws.id),
      el("dt", {}, "Provider"), el("dd", {}, ws.provider),
      el("dt", {}, "Isolation"), el("dd", {}, info.isolation || "—"),
      el("dt", {}, "Connected"), el("dd", { id: "ws-connected" }, ws.connected ? "yes" : "no"),
      el("dt", {}, "Epoch"), el("dd", {}, String(ws.epoch)),
      el("dt", {}, "Lease"), el("dd", {}, lease.error ? "—" : `${lease.holder} (epoch ${lease.epoch}, until ${fmtTime(lease.expires_at)})`),
      el("dt", {}, "Allocation"), el("dd", {}, ws.allocation_id || "—"),
      el("dt", {}, "Last save"), el("dd", { id: "ws-last-save" }, fmtTime(lastSave)),
      el("dt", {}, "Usage"), el("dd", { id: "ws-usage" }, usageText(ws.usage)),
      el("dt", {}, "Created"), el("dd", {}, fmtTime(ws.created_at)));

    this.closeMsg = el("div", { id: "close-msg" }, message || "");
    const actions = el("div", { class: "row" },
      el("button", { type: "button", id: "close-btn", class: "danger", disabled: ws.state !== "ready", onclick: () => this.act("close") }, "Close"),
      el("button", { type: "button", id: "reopen-btn", disabled: ws.state !== "closed", onclick: () => this.act("reopen") }, "Reopen"),
      el("button", { type: "button", id: "refresh-btn", onclick: () => this.render() }, "Refresh"));
    const readiness = this.readiness(ws, check);

    this.files = new FilesPanel(ws);
    clear(this.main,
      el("h1", { id: "ws-title" }, ws.name, " ", stateBadge(ws.state)),
      el("div", { class: "grid" },
        el("section", { class: "card" }, el("h2", {}, "Workspace"), facts),
        el("section", { class: "card", id: "lifecycle" }, el("h2", {}, "Close readiness"), readiness, actions, this.closeMsg)),
      this.files.root,
      el("div", { class: "grid" },
        this.runsCard(runs),
        this.eventsCard(events)),
      el("div", { class: "grid" },
        this.servicesCard(ws, services),
        this.snapshotsCard(snaps)));
    this.files.open("");
  }

  readiness(ws, check) {
    if (ws.state !== "ready") return el("p", { class: "muted", id: "close-check" }, `The workspace is ${ws.state}.`);
    if (!check || check.error) return el("div", { id: "close-check" }, check ? errorBox(check.error) : "—");
    return el("dl", { class: "facts", id: "close-check" },
      el("dt", {}, "Ready to close"), el("dd", {}, check.ready ? "yes" : "no"),
      el("dt", {}, "Pending changes"), el("dd", {}, check.pending_changes ? "yes (a close saves them first)" : "none"),
      el("dt", {}, "Active runs"), el("dd", {}, String(check.active_runs)),
      el("dt", {}, "Active services"), el("dd", {}, String(check.active_services || 0)),
      el("dt", {}, "Last snapshot"), el("dd", {}, check.last_snapshot || "—"),
      (check.reasons || []).length ? [el("dt", {}, "Reasons"), el("dd", {}, check.reasons.join("; "))] : null);
  }

  async act(what) {
    for (const b of this.main.querySelectorAll("#close-btn, #reopen-btn")) b.disabled = true;
    clear(this.closeMsg, el("p", { class: "muted" }, what === "close" ? "Closing: saving the workspace…" : "Reopening…"));
    try {
      const res = await postJSON(`${this.base()}/${what}`, {});
      const done = what === "close"
        ? `Closed; saved in ${res.saved_in || "—"}.`
        : "Reopened.";
      await this.render(el("div", { class: "notice", id: "action-done" }, done));
    } catch (err) {
      // A refusal is shown as the API says it, and the page stays as it was.
      clear(this.closeMsg, el("div", { class: "error", id: "action-refused", role: "alert" },
        `${what === "close" ? "Close" : "Reopen"} refused: ${err}`));
      for (const b of this.main.querySelectorAll("#close-btn")) b.disabled = this.ws.state !== "ready";
      for (const b of this.main.querySelectorAll("#reopen-btn")) b.disabled = this.ws.state !== "closed";
    }
  }

  eventsCard(events) {
    const body = events.error ? errorBox(events.error)
      : el("ol", { class: "timeline", id: "events" }, events.map((e) => el("li", {},
        el("time", {}, fmtTime(e.at)), e.from ? `${e.from} → ` : "", el("strong", {}, e.to), e.cause ? ` · ${e.cause}` : "")));
    return el("section", { class: "card" }, el("h2", {}, "Events"), body);
  }

  runsCard(runs) {
    const out = el("div", { id: "run-view" });
    const body = runs.error ? errorBox(runs.error) : el("table", { id: "runs" },
      el("thead", {}, el("tr", {}, ["Run", "Command", "State", "Exit", "Started", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, runs.length ? runs.slice().reverse().map((r) => el("tr", { dataset: { run: r.id } },
        el("td", {}, r.id), el("td", {}, (r.argv || []).join(" ")), el("td", {}, r.state),
        el("td", {}, r.exit_code !== undefined && r.exit_code !== null ? String(r.exit_code) : "—"), el("td", {}, fmtTime(r.started_at)),
        el("td", {}, el("button", { type: "button", class: "run-output", dataset: { run: r.id }, onclick: () => this.follow(r, out) }, "Output"))))
        : el("tr", {}, el("td", { colspan: 6, class: "muted" }, "No runs."))));
    return el("section", { class: "card", id: "runs-card" }, el("h2", {}, "Runs"), body, out);
  }

  // follow shows a run's output from its start, following it while it runs.
  async follow(run, out) {
    this.leave();
    const ac = new AbortController();
    this.aborts.push(ac);
    const pre = el("pre", { id: "run-output" });
    const status = el("p", { class: "muted", id: "run-status" }, run.state === "running" ? "Following…" : "");
    clear(out, el("h2", {}, `Output of ${run.id}`), pre, status);
    const dec = [new TextDecoder(), new TextDecoder()];
    try {
      const q = run.state === "running" ? "?follow=true" : "";
      const resp = await request("GET", `/v1/runs/${enc(run.id)}/logs${q}`, { signal: ac.signal });
      await readFrames(resp, (ch, p) => {
        if (ch === CH_STDOUT || ch === CH_STDERR) appendCapped(pre, dec[ch - 1].decode(p, { stream: true }));
        else if (ch === CH_GAP) {
          const g = JSON.parse(new TextDecoder().decode(p));
          appendCapped(pre, `\n[${g.to - g.from} bytes of ${g.stream} are no longer held]\n`);
        } else if (ch === CH_END) {
          const end = JSON.parse(new TextDecoder().decode(p));
          status.textContent = end.finished && end.exit ? `Finished: exit ${end.exit.exit_code}${end.exit.signal ? ` (signal ${end.exit.signal})` : ""}.` : "End of the log so far.";
        } else if (ch === CH_ERROR) {
          const e = JSON.parse(new TextDecoder().decode(p));
          clear(status, errorBox(`error: ${e.code}: ${e.message}`));
        }
      });
    } catch (err) {
      if (err.name !== "AbortError") clear(status, errorBox(err));
    }
  }

  servicesCard(ws, services) {
    const view = el("div", { id: "service-view" });
    let body;
    if (services.error) body = errorBox(services.error);
    else if (!ws.connected) body = el("p", { class: "muted" }, "The runner is not connected: no services.");
    else body = el("table", { id: "services" },
      el("thead", {}, el("tr", {}, ["Service", "State", "Port", "Restarts", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, services.length ? services.map((s) => el("tr", {},
        el("td", {}, s.name), el("td", {}, s.state, s.reason ? ` (${s.reason})` : ""), el("td", {}, s.port ? String(s.port) : "—"), el("td", {}, String(s.restarts)),
        el("td", {}, el("div", { class: "row" },
          el("button", { type: "button", onclick: () => this.serviceLogs(s, view) }, "Logs"),
          s.state === "ready" ? el("button", { type: "button", onclick: () => this.openService(s, view) }, "Open") : null))))
        : el("tr", {}, el("td", { colspan: 5, class: "muted" }, "No services."))));
    return el("section", { class: "card" }, el("h2", {}, "Services"), body, view);
  }

  async serviceLogs(s, view) {
    const pre = el("pre", {});
    clear(view, el("h2", {}, `Logs of ${s.name}`), pre);
    const ac = new AbortController();
    this.aborts.push(ac);
    try {
      const resp = await request("GET", `${this.base()}/services/${enc(s.name)}/logs`, { signal: ac.signal });
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let n = 0;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        n += value.length;
        appendCapped(pre, dec.decode(value, { stream: true }), 256 << 10);
        if (n > 4 << 20) { ac.abort(); break; }
      }
    } catch (err) {
      if (err.name !== "AbortError") clear(view, errorBox(err));
    }
  }

  // openService makes a preview link of the service and opens it in a new tab (the proxy under
  // /v1 wants the API's credentials, which a browser's navigation cannot carry; a browser that
  // blocks the tab still shows the link), and shows the API endpoint for clients holding a
  // token. The new tab gets no handle on the console (noopener).
  async openService(s, view) {
    try {
      const [pv, ep] = await Promise.all([
        postJSON(`${this.base()}/services/${enc(s.name)}/previews`, { ttl: "1h" }),
        getJSON(`${this.base()}/services/${enc(s.name)}/endpoint`).catch(() => null),
      ]);
      const link = pv.url || pv.path_url;
      const a = el("a", { href: link, target: "_blank", rel: "noopener noreferrer" }, link);
      clear(view, el("p", {}, "Preview link (1 hour): ", a),
        ep ? el("p", { class: "muted" }, `API endpoint (with a token): ${ep.url}`) : null);
      a.click();
    } catch (err) {
      clear(view, errorBox(err));
    }
  }

  snapshotsCard(snaps) {
    const body = snaps.error ? errorBox(snaps.error) : el("table", { id: "snapshots" },
      el("thead", {}, el("tr", {}, ["Snapshot", "Saved at", "Epoch", "Entries", "Stored", "Kind"].map((h) => el("th", {}, h)))),
      el("tbody", {}, snaps.length ? snaps.slice().reverse().map((s) => el("tr", {},
        el("td", {}, s.id), el("td", {}, fmtTime(s.created_at)), el("td", {}, String(s.epoch)), el("td", { class: "num" }, String(s.entries)),
        el("td", { class: "num" }, fmtBytes(s.bytes)), el("td", {}, s.checkpoint ? "checkpoint" : "snapshot")))
        : el("tr", {}, el("td", { colspan: 6, class: "muted" }, "No snapshots."))));
    return el("section", { class: "card" }, el("h2", {}, "Snapshots"), body);
  }
}
