// The Files panel: browse, preview and download a workspace's files, labelled from what the API
// says of each answer's source (X-Tether-Source and friends): "Live workspace", or "Saved copy ·
// saved at T" for the very receipt read. An answer from another source than the one shown (the
// workspace was closed or reopened meanwhile) relabels the panel and reloads the listing, so
// browse, preview and download never disagree silently.

import { el, clear, request, getJSON, enc, fmtTime, fmtBytes, errorBox, ApiError } from "./lib.js";

const TEXT_LIMIT = 256 << 10; // a text preview shows at most this much
const IMAGE_LIMIT = 16 << 20; // images larger than this are only downloaded
const IMAGE_TYPES = { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", bmp: "image/bmp", ico: "image/x-icon", svg: "image/svg+xml" };

function sourceOfHeaders(h) {
  return { source: h.get("X-Tether-Source") || "", snapshot_id: h.get("X-Tether-Snapshot") || "", saved_at: h.get("X-Tether-Saved-At") || "" };
}

function sourceKey(src) { return src ? `${src.source}/${src.snapshot_id || ""}` : ""; }

export function sourceLabel(src) {
  if (!src || !src.source) return "unavailable";
  if (src.source === "live") return "Live workspace";
  return `Saved copy · saved at ${fmtTime(src.saved_at)}`;
}

export class FilesPanel {
  constructor(ws) {
    this.ws = ws;
    this.path = "";
    this.src = null;
    this.label = el("span", { id: "files-label", class: "files-label" }, "…");
    this.crumbs = el("div", { class: "row crumbs", id: "files-crumbs" });
    this.msg = el("div", { id: "files-msg" });
    this.list = el("div", { id: "files-list" });
    this.preview = el("div", { id: "files-preview", class: "preview" });
    this.root = el("section", { class: "card", id: "files" },
      el("div", { class: "row" }, el("h2", {}, "Files"), this.label,
        el("button", { type: "button", id: "files-refresh", onclick: () => this.open(this.path) }, "Refresh")),
      this.crumbs, this.msg, this.list, this.preview);
    this.downloadURL = null;
  }

  base() { return `/v1/workspaces/${enc(this.ws.id)}/files/`; }
  url(path) { return this.base() + enc(path); }

  // setSource shows where an answer came from; true when it is the source shown before.
  setSource(src, why) {
    const changed = this.src !== null && sourceKey(src) !== sourceKey(this.src);
    const before = this.src;
    this.src = src;
    this.label.className = `files-label ${src && src.source ? src.source : "unavailable"}`;
    this.label.textContent = sourceLabel(src);
    this.label.dataset.source = src && src.source ? src.source : "unavailable";
    this.label.dataset.snapshot = (src && src.snapshot_id) || "";
    if (changed && why) {
      clear(this.msg, el("div", { class: "notice" }, `The ${why} came from ${sourceLabel(src)}, not ${sourceLabel(before)} as listed: the listing is reloaded.`));
    }
    return !changed;
  }

  unavailable(err) {
    this.src = null;
    this.label.className = "files-label unavailable";
    this.label.textContent = "unavailable";
    this.label.dataset.source = "unavailable";
    this.label.dataset.snapshot = "";
    clear(this.list);
    clear(this.preview);
    clear(this.msg, errorBox(err, "files-error"));
  }

  async open(path) {
    this.path = path;
    this.renderCrumbs();
    clear(this.preview);
    let page;
    const entries = [];
    try {
      let cursor = "";
      do {
        page = await getJSON(`${this.url(path)}?list&limit=1000${cursor ? `&cursor=${enc(cursor)}` : ""}`);
        entries.push(...(page.entries || []));
        cursor = page.next || "";
      } while (cursor && entries.length < 5000);
    } catch (err) {
      if (err instanceof ApiError && err.code !== "unavailable" && this.src) {
        clear(this.msg, errorBox(err, "files-error"));
        return;
      }
      this.unavailable(err);
      return;
    }
    clear(this.msg);
    this.setSource({ source: page.source, snapshot_id: page.snapshot_id, saved_at: page.saved_at }, null);
    const rows = entries.map((e) => {
      const full = path ? `${path}/${e.name}` : e.name;
      const name = e.type === "dir"
        ? el("button", { type: "button", class: "link", dataset: { path: full, type: "dir" }, onclick: () => this.open(full) }, `${e.name}/`)
        : el("button", { type: "button", class: "link", dataset: { path: full, type: e.type }, onclick: () => this.show(full, e) }, e.name);
      const actions = e.type === "file"
        ? el("button", { type: "button", class: "download", dataset: { path: full }, onclick: () => this.download(full) }, "Download")
        : (e.type === "symlink" ? el("span", { class: "muted" }, `→ ${e.link_target || ""}`) : "");
      return el("tr", {}, el("td", {}, name), el("td", { class: "muted" }, e.type), el("td", { class: "num" }, e.type === "file" ? fmtBytes(e.size) : ""),
        el("td", { class: "muted" }, fmtTime(e.mtime)), el("td", {}, actions));
    });
    const more = page.next ? el("p", { class: "muted" }, `Only the first ${entries.length} entries are shown.`) : null;
    clear(this.list, el("table", {}, el("thead", {}, el("tr", {}, ["Name", "Type", "Size", "Modified", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 5, class: "muted" }, "(empty directory)")))), more);
  }

  renderCrumbs() {
    const parts = this.path ? this.path.split("/") : [];
    const items = [el("button", { type: "button", class: "link", onclick: () => this.open("") }, "/")];
    parts.forEach((p, i) => {
      const to = parts.slice(0, i + 1).join("/");
      items.push(el("button", { type: "button", class: "link", onclick: () => this.open(to) }, p), "/");
    });
    clear(this.crumbs, items);
  }

  // read fetches a file (its first `limit` bytes when it is larger) and checks the answer's
  // source against the one shown.
  async read(path, limit, why) {
    const headers = {};
    if (limit) headers.Range = `bytes=0-${limit - 1}`;
    const resp = await request("GET", this.url(path), { headers });
    const src = sourceOfHeaders(resp.headers);
    const blob = await resp.blob();
    const total = Number(resp.headers.get("X-Tether-Size") || blob.size);
    if (!this.setSource(src, why)) {
      const shown = this.path;
      queueMicrotask(() => this.reloadListing(shown));
    }
    return { blob, total, src };
  }

  async reloadListing(path) {
    const msg = Array.from(this.msg.childNodes);
    await this.open(path);
    if (!this.msg.childNodes.length) clear(this.msg, msg);
  }

  async show(path, entry) {
    clear(this.preview, el("p", { class: "muted" }, `Loading ${path}…`));
    const name = path.split("/").pop();
    const ext = name.includes(".") ? name.split(".").pop().toLowerCase() : "";
    try {
      if (entry.type !== "file") {
        clear(this.preview, el("p", { class: "muted" }, `${path} is a ${entry.type}; only regular files are previewed.`));
        return;
      }
      if (IMAGE_TYPES[ext]) {
        if (entry.size > IMAGE_LIMIT) {
          clear(this.preview, el("p", { class: "muted" }, `${name} is ${fmtBytes(entry.size)}: download it to see it.`));
          return;
        }
        const { blob, src } = await this.read(path, 0, "preview");
        // The image's type is the console's choice from the name, never the workspace's word;
        // an SVG shown by an <img> runs no script.
        const url = URL.createObjectURL(new Blob([blob], { type: IMAGE_TYPES[ext] }));
        const img = el("img", { id: "preview-image", alt: name, src: url });
        // Revoked however it ends: a blob URL left alive (an image that failed to decode) could
        // be opened in a tab of the console's origin.
        img.addEventListener("load", () => URL.revokeObjectURL(url), { once: true });
        img.addEventListener("error", () => URL.revokeObjectURL(url), { once: true });
        clear(this.preview, el("h2", {}, name, " ", el("span", { class: "muted" }, `(${sourceLabel(src)})`)), img);
        return;
      }
      const limit = entry.size > TEXT_LIMIT ? TEXT_LIMIT : 0;
      const { blob, total, src } = await this.read(path, limit, "preview");
      const bytes = new Uint8Array(await blob.arrayBuffer());
      const head = el("h2", {}, name, " ", el("span", { class: "muted", id: "preview-source" }, `(${sourceLabel(src)})`));
      if (bytes.subarray(0, 8192).includes(0)) {
        clear(this.preview, head, el("p", { class: "muted", id: "preview-binary" }, `Binary file, ${fmtBytes(total)}: download it.`));
        return;
      }
      const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
      const note = total > bytes.length ? el("p", { class: "muted" }, `The first ${fmtBytes(bytes.length)} of ${fmtBytes(total)}.`) : null;
      const pre = el("pre", { id: "preview-text", class: "light" });
      pre.textContent = text;
      clear(this.preview, head, note, pre);
    } catch (err) {
      clear(this.preview, errorBox(err, "preview-error"));
      if (err instanceof ApiError && err.code === "unavailable") this.unavailable(err);
    }
  }

  async download(path) {
    const name = path.split("/").pop();
    try {
      const { blob, src } = await this.read(path, 0, "download");
      // Always an opaque octet stream saved as a file: a blob URL of the console's origin
      // opened as HTML would run in the console.
      if (this.downloadURL) URL.revokeObjectURL(this.downloadURL);
      this.downloadURL = URL.createObjectURL(new Blob([blob], { type: "application/octet-stream" }));
      const a = el("a", { href: this.downloadURL, download: name, hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      clear(this.msg, el("div", { class: "notice", id: "download-msg" }, `Downloaded ${name}, ${fmtBytes(blob.size)}, from ${sourceLabel(src)}.`));
    } catch (err) {
      clear(this.msg, errorBox(err, "files-error"));
      if (err instanceof ApiError && err.code === "unavailable") this.unavailable(err);
    }
  }
}
