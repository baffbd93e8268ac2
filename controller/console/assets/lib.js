// Shared by the console's pages: DOM building (text only: nothing from a workspace or the API
// is ever parsed as HTML), the API client (session cookie plus the session's secret header),
// and formatting.

let secret = ""; // the session's secret: in memory only, never in storage another page could read
let onSignedOut = () => {};

export function setSession(csrf, signedOut) {
  secret = csrf;
  if (signedOut) onSignedOut = signedOut;
}

export function hasSession() { return secret !== ""; }

// el builds an element; strings among the children become text nodes.
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export function clear(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
  return node;
}

// ApiError is a typed error of the API: shown as "error: CODE: MESSAGE", like the CLI.
export class ApiError extends Error {
  constructor(code, message, status, headers) {
    super(message);
    this.code = code;
    this.status = status;
    this.headers = headers;
  }
  toString() { return `error: ${this.code}: ${this.message}`; }
}

// request sends one API call with the session and returns the Response; any answer other than
// 2xx is thrown as an ApiError.
export async function request(method, path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  headers.set("X-Tether-CSRF", secret);
  let body;
  if (opts.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(opts.json);
  }
  let resp;
  try {
    resp = await fetch(path, { method, headers, body, credentials: "same-origin", cache: "no-store", signal: opts.signal, redirect: "error" });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError("unavailable", `the controller did not answer: ${e.message}`, 0, new Headers());
  }
  if (resp.ok) return resp;
  let code = "internal";
  let message = `HTTP ${resp.status}`;
  try {
    const b = await resp.json();
    if (b && b.error && b.error.code) ({ code, message } = b.error);
  } catch { /* not a typed error body */ }
  const err = new ApiError(code, message, resp.status, resp.headers);
  if (resp.status === 401 && path.startsWith("/v1/")) {
    secret = "";
    onSignedOut(err);
  }
  throw err;
}

export async function getJSON(path, opts) {
  const resp = await request("GET", path, opts);
  return resp.json();
}

export async function postJSON(path, json, opts = {}) {
  const resp = await request(opts.method || "POST", path, { ...opts, json });
  if (resp.status === 204) return null;
  return resp.json();
}

export const enc = encodeURIComponent;

// fmtTime shows a time in UTC to the second: "2026-12-03 10:20:31 UTC".
export function fmtTime(t) {
  if (!t) return "—";
  const d = new Date(t);
  if (isNaN(d)) return "—";
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function fmtBytes(n) {
  if (n === undefined || n === null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function stateBadge(state) {
  return el("span", { class: `state state-${state}` }, state || "—");
}

export function errorBox(err, id) {
  return el("div", { class: "error", id, role: "alert" }, String(err));
}

// frames reads the API's channel framing (one byte of channel, four of length, the payload)
// from a response body, calling onFrame(channel, bytes) for each.
export async function readFrames(resp, onFrame) {
  const reader = resp.body.getReader();
  let buf = new Uint8Array(0);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      if (buf.length) throw new ApiError("unavailable", "the stream was cut mid-frame", 0, new Headers());
      return;
    }
    const joined = new Uint8Array(buf.length + value.length);
    joined.set(buf);
    joined.set(value, buf.length);
    buf = joined;
    while (buf.length >= 5) {
      const n = new DataView(buf.buffer, buf.byteOffset + 1, 4).getUint32(0);
      if (n > (1 << 20)) throw new ApiError("corrupt", `a frame of ${n} bytes exceeds 1 MiB`, 0, new Headers());
      if (buf.length < 5 + n) break;
      onFrame(buf[0], buf.slice(5, 5 + n));
      buf = buf.slice(5 + n);
    }
  }
}

// capped appends text to a <pre>, keeping at most max characters (the oldest go first).
export function appendCapped(pre, text, max = 1 << 20) {
  pre.append(document.createTextNode(text));
  let len = pre.textContent.length;
  while (len > max && pre.firstChild) {
    len -= pre.firstChild.textContent.length;
    pre.firstChild.remove();
  }
}
