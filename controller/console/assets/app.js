// The console's entry: sign-in, the workspaces list and the routes (#/ and #/w/ID).

import { el, clear, request, getJSON, setSession, hasSession, enc, fmtTime, stateBadge, errorBox, ApiError } from "./lib.js";
import { WorkspacePage } from "./workspace.js";

const main = document.getElementById("main");
const who = document.getElementById("who");
const signoutBtn = document.getElementById("signout");
let page = null;

function signedOut(err) {
  who.textContent = "";
  signoutBtn.hidden = true;
  if (page) page.leave();
  page = null;
  showSignIn(err);
}

function showSignIn(err) {
  const input = el("input", { type: "password", id: "token", autocomplete: "off", placeholder: "tot_… or tether_api_…", "aria-label": "Token" });
  const msg = el("div", { id: "signin-msg" }, err ? errorBox(err, "signin-error") : null);
  const form = el("form", { class: "card", id: "signin-form" },
    el("h1", {}, "Sign in"),
    el("p", {}, "Paste the operator token (DATA/operator.token) or an API token. It is checked as the API checks it and exchanged for a session; reloading the page asks again."),
    el("div", { class: "row" }, input),
    el("div", { class: "row" }, el("button", { type: "submit", class: "primary", id: "signin-btn" }, "Sign in")),
    msg);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(msg);
    try {
      const resp = await fetch("/ui/session", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token: input.value }), credentials: "same-origin", cache: "no-store" });
      const body = await resp.json();
      if (!resp.ok) throw new ApiError(body.error.code, body.error.message, resp.status, resp.headers);
      input.value = "";
      setSession(body.csrf, signedOut);
      who.textContent = `Signed in as ${body.principal} until ${fmtTime(body.expires_at)}`;
      signoutBtn.hidden = false;
      route();
    } catch (e) {
      clear(msg, errorBox(e, "signin-error"));
    }
  });
  clear(main, el("div", { class: "signin" }, form));
  input.focus();
}

signoutBtn.addEventListener("click", async () => {
  try { await request("DELETE", "/ui/session"); } catch { /* signed out either way */ }
  setSession("");
  signedOut();
});

async function listPage() {
  clear(main, el("h1", {}, "Workspaces"), el("p", { class: "muted" }, "Loading…"));
  let list;
  try {
    list = await getJSON("/v1/workspaces");
  } catch (err) {
    clear(main, el("h1", {}, "Workspaces"), errorBox(err, "list-error"));
    return;
  }
  const rows = list.map((ws) => {
    const isolation = el("td", {}, (ws.allocation_info || {}).isolation || "…");
    const lease = el("td", {}, "…");
    const saved = el("td", { class: "last-save" }, "…");
    const tr = el("tr", { dataset: { ws: ws.id } },
      el("td", {}, el("a", { href: `#/w/${enc(ws.id)}` }, ws.name)),
      el("td", { class: "muted" }, ws.id),
      el("td", {}, stateBadge(ws.state)),
      el("td", {}, ws.provider),
      isolation,
      el("td", {}, ws.connected ? "yes" : "no"),
      el("td", { class: "num" }, String(ws.epoch)),
      lease, saved);
    return { ws, tr, isolation, lease, saved };
  });
  clear(main, el("div", { class: "row" }, el("h1", {}, "Workspaces"), el("button", { type: "button", id: "list-refresh", onclick: listPage }, "Refresh")),
    el("section", { class: "card" }, el("table", { id: "workspaces" },
      el("thead", {}, el("tr", {}, ["Name", "ID", "State", "Provider", "Isolation", "Connected", "Epoch", "Lease holder", "Last save"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows.map((r) => r.tr) : el("tr", {}, el("td", { colspan: 9, class: "muted" }, "No workspaces."))))));
  // The sandbox's isolation, the lease and the last save are per workspace in the API: asked
  // a few workspaces at a time.
  const queue = rows.slice();
  const worker = async () => {
    for (let r = queue.shift(); r; r = queue.shift()) {
      const base = `/v1/workspaces/${enc(r.ws.id)}`;
      const [full, lease, snaps] = await Promise.all([getJSON(base).catch(() => null),
        getJSON(`${base}/lease`).catch(() => null), getJSON(`${base}/snapshots`).catch(() => null)]);
      r.isolation.textContent = (full && (full.allocation_info || {}).isolation) || "—";
      r.lease.textContent = lease ? lease.holder : "—";
      const last = Array.isArray(snaps) && snaps.length ? snaps.map((s) => s.created_at).sort().pop() : null;
      r.saved.textContent = fmtTime(last);
      r.tr.dataset.loaded = "true";
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  main.dataset.listLoaded = "true";
}

function route() {
  if (page) page.leave();
  page = null;
  delete main.dataset.listLoaded;
  if (!hasSession()) {
    showSignIn();
    return;
  }
  const m = location.hash.match(/^#\/w\/([^/]+)$/);
  if (m) {
    page = new WorkspacePage(main, decodeURIComponent(m[1]));
    page.render();
    return;
  }
  listPage();
}

window.addEventListener("hashchange", route);
route();
