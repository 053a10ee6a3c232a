// Jupiter's tree viewer: the one renderer of a search tree, used by tree.html (inlined there) and by the
// service page (served as /static/tree_view.js), both fed the same JSON (search/html.py, tree_view_data).
//
// Plain ES2017 + SVG, no dependency and no network: tree.html must open from disk. Model text (questions,
// thoughts, cells, outputs, answers) reaches the page only through textContent and SVG attributes set with
// setAttribute, never innerHTML, so no reply can inject markup or script.
//
// Layout: a tidy tree (Reingold–Tilford with explicit contours) drawn left to right: depth on x, siblings
// stacked on y. Each subtree is packed against its left siblings as tightly as its contour allows (level by
// level), a parent sits midway between its first and last child, and a parent's own level also reserves the
// band its edges fan out through, so no node or answer chip lies under another subtree's edges. Answer leaves
// are chips whose width is measured and capped (CHIP_MAX); each depth column is as wide as its widest shape
// plus a margin, so chips can never reach into the next column, and never overlap.
(function (global) {
  "use strict";

  const NS = "http://www.w3.org/2000/svg";
  const COLUMN_MIN = 56;       // px, the narrowest depth column (room for the edges to curve)
  const COLUMN_PAD = 24;       // px between the widest shape of a column and the next column's centres
  const COLUMN_WIDE = 190;     // px, the widest a column is spread to fill a window's width
  const CHIP_MAX = 112;        // px, widest chip including padding
  const CHIP_H = 15;           // px, chip height
  const CHIP_FONT = "600 10.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";
  const GAP = 3;               // px between neighbouring shapes in a column
  const ANSWER_R = 4;          // px, the dot an answer chip hangs from
  const MODEL_FAILURES = new Set(["unparsable", "no-code", "empty-code", "truncated-reply", "too-many-errors",
                                  "max-depth", "context-limit"]);
  // answer groups in vote order; blue is kept for the chosen path
  const PALETTE = ["#e8871e", "#3a9d4a", "#d6484f", "#8e63c2", "#c7a117", "#2aa6a0", "#e377c2", "#8c6d4f",
                   "#6b8e23", "#b5651d"];
  const OTHER = "#a3a3a3";     // groups beyond the palette
  const CHOSEN = "#2463eb";
  const ERROR_RING = "#b91c1c"; // a step whose cell raised

  // The viewer's own styles (one file to inline or serve: no stylesheet to keep in step); pages style the rest.
  const CSS = [
    ".tv-host{position:relative;overflow:hidden;background:#fff}",
    ".tv-svg{position:absolute;inset:0;width:100%;height:100%;cursor:grab;touch-action:none;user-select:none}",
    ".tv-svg.tv-dragging{cursor:grabbing}",
    ".tv-toolbar{position:absolute;top:6px;left:8px;z-index:2;display:flex;gap:4px;align-items:center;" +
      "background:rgba(255,255,255,.9);padding:2px 4px;border-radius:6px;font:12px system-ui,sans-serif}",
    ".tv-btn{font:12px system-ui,sans-serif;padding:2px 8px;border:1px solid #9ca3af;border-radius:4px;" +
      "background:#f9fafb;color:#111;cursor:pointer}",
    ".tv-btn:hover{background:#e5e7eb}",
    ".tv-toolbar label.tv-colour{display:inline;margin:0 0 0 6px;font-weight:normal;font-size:12px}",
    ".tv-toolbar select{width:auto;font:12px system-ui,sans-serif;padding:1px 2px}",
    ".tv-legend{position:absolute;bottom:3px;left:8px;right:8px;z-index:2;font:11px system-ui,sans-serif;" +
      "color:#6b7280;background:rgba(255,255,255,.85);pointer-events:none}",
    ".tv-empty{position:absolute;top:40px;left:12px;color:#6b7280}",
    ".tv-host [hidden]{display:none!important}",
    ".tv-svg circle.node,.tv-svg g.chip{cursor:pointer}",
    ".tv-svg circle.selected{filter:drop-shadow(0 0 3px #111)}",
    ".tv-svg g.chip.chosen rect{filter:drop-shadow(0 0 2px " + "#2463eb)}",
    ".tv-svg .chip-text,.tv-svg .badge-text{font:" + CHIP_FONT + ";pointer-events:none}",
    ".tv-svg .badge-text{fill:#374151}",
    ".tv-svg.tv-highlighting .tv-node:not(.hl){opacity:.22}",
    ".tv-svg.tv-highlighting .tv-edge:not(.hl){opacity:.18}",
    ".tv-svg .tv-edge.hl{stroke:#111;stroke-width:2px}",
    ".tv-svg g.chip.hl rect{stroke:#111;stroke-width:2px}",
    ".tv-svg circle.fresh{animation:tv-grow .6s ease-out;transform-box:fill-box;transform-origin:center}",
    "@keyframes tv-grow{from{transform:scale(.2)}to{transform:scale(1)}}",
    ".tv-question{font-size:16px;margin:6px 0 4px;white-space:pre-wrap}",
    ".tv-meta{font-size:12px;margin:2px 0}",
    ".tv-decision,.tv-label{margin:4px 0;font-size:13px}",
    ".tv-answer{font-family:ui-monospace,monospace;word-break:break-word}",
    ".tv-ok{color:#15803d;font-weight:600}.tv-bad{color:#b91c1c;font-weight:600}",
    ".tv-vote{border-collapse:collapse;font-size:12px;margin:6px 0;width:100%}",
    ".tv-vote th{text-align:left;color:#6b7280;font-weight:600;border-bottom:1px solid #ddd;padding:2px 4px}",
    ".tv-vote td{padding:2px 4px;border-bottom:1px solid #eee;cursor:pointer;white-space:normal;vertical-align:top}",
    ".tv-vote tr:hover{background:#f1f5f9}.tv-vote tr.active{background:#fef3c7}",
    ".tv-vote-key{font-family:ui-monospace,monospace;word-break:break-all}",
    ".tv-vote-count,.tv-vote-match{text-align:right;width:3em}",
    ".tv-swatch{display:inline-block;width:11px;height:11px;border-radius:3px;vertical-align:-1px}",
    ".tv-note{font-size:12px;margin:2px 0}",
  ].join("\n");

  function ensureStyle() {
    if (document.getElementById("tv-style")) return;
    const style = document.createElement("style");
    style.id = "tv-style";
    style.textContent = CSS;
    document.head.appendChild(style);
  }

  // ---------------------------------------------------------------------------------------------- helpers
  function svgEl(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(e);
    return e;
  }

  function htmlEl(name, className, text, parent) {
    const e = document.createElement(name);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (parent) parent.appendChild(e);
    return e;
  }

  function isNil(v) { return v === null || v === undefined; }

  function kindOf(n) {
    if (n.kind) return n.kind;
    if (isNil(n.parent)) return "root";
    if (n.status === "answer" || n.terminal === "answer") return "answer";
    if (n.status === "infrastructure" || n.terminal === "infrastructure") return "infrastructure";
    if (MODEL_FAILURES.has(n.terminal)) return "failure";
    return "step";
  }

  /** "@mean_fare[34.65]" -> "34.65"; several answers -> their values joined; cut to fit a chip. */
  function shortAnswer(answer, maxChars) {
    const text = String(isNil(answer) ? "" : answer).trim();
    const values = Array.from(text.matchAll(/@[^\[\]\s]+\[([^\]]*)\]/g), m => m[1].trim());
    let label = values.length ? values.join(" · ") : text.replace(/\s+/g, " ");
    if (!label) label = "(empty)";
    if (label.length > maxChars) label = label.slice(0, maxChars - 1) + "…";
    return label;
  }

  /** The provisional grouping key of an answer when no vote table is given (a live tree): folded text. */
  function rawKey(answer) { return String(isNil(answer) ? "" : answer).trim().toLowerCase().split(/\s+/).join(" "); }

  function valueColour(v) {
    const t = Math.max(-1, Math.min(1, Number(v) || 0));
    const r = t < 0 ? 220 : Math.round(220 - 170 * t), g = t > 0 ? 190 : Math.round(190 + 100 * t);
    return "rgb(" + r + "," + g + ",80)";
  }

  function textOn(hex) {
    const m = /^#([0-9a-f]{6})$/i.exec(hex);
    if (!m) return "#111";
    const v = parseInt(m[1], 16), r = v >> 16, g = (v >> 8) & 255, b = v & 255;
    return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? "#111" : "#fff";
  }

  let measureCtx = null;
  function textWidth(text) {
    if (measureCtx === null) {
      const canvas = document.createElement("canvas");
      measureCtx = canvas.getContext ? canvas.getContext("2d") : undefined;
      if (measureCtx) measureCtx.font = CHIP_FONT;
    }
    return measureCtx ? measureCtx.measureText(text).width : text.length * 6.4;
  }

  /** A chip label that fits CHIP_MAX: the longest prefix whose measured width fits. */
  function chipLabel(text) {
    let chars = 18, label = text;
    for (;;) {
      label = shortAnswer(text, chars);
      const width = textWidth(label) + 10;
      if (width <= CHIP_MAX || chars <= 3) return {label: label, width: Math.min(width, CHIP_MAX)};
      chars -= 1;
    }
  }

  // ---------------------------------------------------------------------------------------------- the model
  /** Nodes, children, answer groups and vote rows from the JSON (a full view, or a live partial one). */
  function buildModel(data) {
    const nodes = new Map(), children = new Map();
    let root = null;
    for (const raw of data.nodes || []) {
      if (isNil(raw.tag)) continue;
      const n = Object.assign({}, raw);
      n.tag = String(n.tag);
      n.kind = kindOf(n);
      nodes.set(n.tag, n);
    }
    for (const n of nodes.values()) {
      if (isNil(n.parent) || !nodes.has(String(n.parent))) { if (root === null) root = n.tag; continue; }
      const p = String(n.parent);
      if (!children.has(p)) children.set(p, []);
      children.get(p).push(n.tag);
    }
    // vote rows: given (normalised by the engine) or, on a live tree, grouped by the answer's folded text
    let rows, provisional = false;
    if (Array.isArray(data.vote)) {
      rows = data.vote.map(r => ({key: String(r.key), answer: isNil(r.answer) ? "" : String(r.answer),
                                  count: Number(r.count) || 0,
                                  matches: isNil(r.matches_label) ? null : !!r.matches_label,
                                  tags: (r.tags || []).map(String)}));
    } else {
      provisional = true;
      const byKey = new Map();
      for (const n of nodes.values()) {
        if (n.kind !== "answer") continue;
        const key = isNil(n.key) ? rawKey(n.answer) : String(n.key);
        if (!byKey.has(key)) byKey.set(key, {key: key, answer: isNil(n.answer) ? "" : String(n.answer), count: 0,
                                             matches: null, tags: []});
        const row = byKey.get(key);
        row.count += Math.max(1, Number(n.multiplicity) || 1);
        row.tags.push(n.tag);
      }
      rows = Array.from(byKey.values()).sort((a, b) => b.count - a.count);  // stable: first found first
    }
    const groupOf = new Map();
    rows.forEach((row, i) => {
      row.index = i;
      row.colour = i < PALETTE.length ? PALETTE[i] : OTHER;
      for (const tag of row.tags) groupOf.set(tag, row);
    });
    const chosen = new Set();
    let c = isNil(data.chosen_tag) ? null : nodes.get(String(data.chosen_tag));
    while (c) { chosen.add(c.tag); c = isNil(c.parent) ? null : nodes.get(String(c.parent)); }
    const hasValues = Array.from(nodes.values()).some(n => n.kind !== "failure" && n.kind !== "root" &&
                                                           Number(n.value) !== 0 && !isNil(n.value));
    return {nodes: nodes, children: children, root: root, rows: rows, provisional: provisional, groupOf: groupOf,
            chosen: chosen, hasValues: hasValues};
  }

  /** Per node: its subtree's votes per answer group, and its size (for the colour and the "+N" badges). */
  function subtreeStats(model) {
    const stats = new Map();
    const visit = tag => {
      const counts = new Map();
      let size = 1;
      const n = model.nodes.get(tag);
      const row = model.groupOf.get(tag);
      if (n.kind === "answer" && row) counts.set(row, Math.max(1, Number(n.multiplicity) || 1));
      for (const k of model.children.get(tag) || []) {
        const s = visit(k);
        size += s.size;
        for (const [r, v] of s.counts) counts.set(r, (counts.get(r) || 0) + v);
      }
      let best = null, total = 0;
      for (const [r, v] of counts) {  // the most votes; ties to the group higher in the vote table
        total += v;
        if (best === null || v > counts.get(best) || (v === counts.get(best) && r.index < best.index)) best = r;
      }
      const s = {counts: counts, size: size, best: best, share: best ? counts.get(best) / total : 0, total: total};
      stats.set(tag, s);
      return s;
    };
    if (model.root !== null) {
      // iterative guard against pathological depth: recursion is fine for search trees (depth <= ~50)
      visit(model.root);
    }
    return stats;
  }

  // ---------------------------------------------------------------------------------------------- layout
  /**
   * Tidy layout, left to right. ``shape(tag)`` gives {half, width}: half the shape's height and its width to
   * the right of the node's centre. Returns Map tag -> {x, y}. Contours are arrays indexed by relative depth.
   */
  function tidyLayout(rootTag, kidsOf, shape) {
    const offsets = new Map();  // tag -> y of each visible child relative to the tag
    const lay = tag => {
      const kids = kidsOf(tag);
      const half = shape(tag).half;
      if (!kids.length) return {top: [-half], bot: [half]};
      const subs = kids.map(lay);
      const accTop = subs[0].top.slice(), accBot = subs[0].bot.slice(), offs = [0];
      for (let i = 1; i < subs.length; i++) {
        const s = subs[i];
        let shift = -Infinity;
        const shared = Math.min(accBot.length, s.top.length);
        for (let k = 0; k < shared; k++) shift = Math.max(shift, accBot[k] - s.top[k] + GAP);
        offs.push(shift);
        for (let k = 0; k < s.top.length; k++) {
          if (k < accBot.length) {
            accTop[k] = Math.min(accTop[k], s.top[k] + shift);
            accBot[k] = Math.max(accBot[k], s.bot[k] + shift);
          } else {
            accTop.push(s.top[k] + shift);
            accBot.push(s.bot[k] + shift);
          }
        }
      }
      const centre = (offs[0] + offs[offs.length - 1]) / 2;
      offsets.set(tag, offs.map(o => o - centre));
      // the node's own level: its shape and the band its edges fan through (first child .. last child)
      const top = [Math.min(-half, offs[0] - centre - 1)], bot = [Math.max(half, offs[offs.length - 1] - centre + 1)];
      for (let k = 0; k < accTop.length; k++) { top.push(accTop[k] - centre); bot.push(accBot[k] - centre); }
      return {top: top, bot: bot};
    };
    lay(rootTag);
    const pos = new Map(), reach = [];  // reach[d]: the widest shape right of its centre at depth d
    const place = (tag, depth, y) => {
      pos.set(tag, {x: 0, y: y, depth: depth});
      reach[depth] = Math.max(reach[depth] || 0, shape(tag).width);
      const offs = offsets.get(tag);
      if (!offs) return;
      kidsOf(tag).forEach((k, i) => place(k, depth + 1, y + offs[i]));
    };
    place(rootTag, 0, 0);
    // each column as wide as its widest chip needs (and room for the edges to curve), so a deep tree of short
    // answers is not stretched by the widest chip a column could hold
    const columnX = [0];
    for (let d = 1; d < reach.length; d++) columnX.push(columnX[d - 1] + Math.max(COLUMN_MIN, reach[d - 1] + COLUMN_PAD));
    for (const p of pos.values()) p.x = columnX[p.depth];
    pos.columnX = columnX;
    return pos;
  }

  // ---------------------------------------------------------------------------------------------- the view
  /**
   * Mount a viewer. ``opts``: {tree: element the SVG fills (its own <svg> child is used when it has one), detail: side-panel element, header: element for the
   * question, decision and vote table (or null), question: show the question in the header (default true),
   * svgId, emptyText, onSelect(node)}. Returns {render(data), fit(), select(tag), highlight(key), expandAll()}.
   */
  function create(opts) {
    const state = {
      model: null, stats: null, pos: null, data: null,
      collapsed: new Set(), selected: null, highlighted: null, known: new Set(), first: true,
      colourBy: "answer", k: 1, tx: 0, ty: 0, userMoved: false, bounds: null,
    };
    ensureStyle();
    const host = opts.tree;
    host.classList.add("tv-host");
    const toolbar = htmlEl("div", "tv-toolbar", null, host);
    const button = (label, title, fn) => {
      const b = htmlEl("button", "tv-btn", label, toolbar);
      b.type = "button"; b.title = title; b.addEventListener("click", fn);
      return b;
    };
    button("fit", "Fit the whole tree in the window", () => { state.userMoved = false; fit(); })
      .classList.add("tv-fit");
    button("+", "Zoom in", () => zoomBy(1.25));
    button("−", "Zoom out", () => zoomBy(0.8));
    button("expand all", "Expand every collapsed subtree", () => expandAll()).classList.add("tv-expand-all");
    const colourLabel = htmlEl("label", "tv-colour", "colour ", toolbar);
    const colourSelect = htmlEl("select", null, null, colourLabel);
    for (const [value, text] of [["answer", "answer group"], ["value", "value"]]) {
      const o = htmlEl("option", null, text, colourSelect); o.value = value;
    }
    colourSelect.addEventListener("change", () => { state.colourBy = colourSelect.value; draw(); });
    const legend = htmlEl("div", "tv-legend", null, host);
    legend.textContent = "colour: answer group (paler: less agreement) · size: visits · blue: chosen path · " +
      "red ring: the cell raised · grey: model failure · dashed orange: infrastructure · " +
      "double-click: fold / unfold · wheel: zoom · drag: pan";
    // the page's own <svg> when its markup has one (tree.html and the service page do), else a new one
    const svg = host.querySelector("svg") || svgEl("svg", {xmlns: NS}, host);
    svg.classList.add("tv-svg");
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    if (opts.svgId) svg.id = opts.svgId;
    const viewport = svgEl("g", {class: "tv-viewport"}, svg);
    const empty = htmlEl("p", "tv-empty muted", opts.emptyText || "No nodes yet.", host);

    // ---------------------------------------------------------------- zoom and pan
    function applyTransform() {
      viewport.setAttribute("transform", "translate(" + state.tx + "," + state.ty + ") scale(" + state.k + ")");
    }
    /** The drawing area: the SVG less the padding, the toolbar above and the legend below. */
    function viewSize() {
      const w = svg.clientWidth || host.clientWidth || 800, h = svg.clientHeight || host.clientHeight || 600;
      const pad = 16, top = toolbar.offsetHeight + 12, bottom = legend.offsetHeight + 8;
      return {w: Math.max(50, w - 2 * pad), h: Math.max(50, h - top - bottom), left: pad, top: top};
    }
    function fit() {
      const b = state.bounds;
      if (!b) return;
      const v = viewSize();
      const k = Math.min(v.w / (b.x1 - b.x0), v.h / (b.y1 - b.y0), 1.5);
      state.k = k > 0 && isFinite(k) ? k : 1;
      state.tx = v.left + (v.w - (b.x1 - b.x0) * state.k) / 2 - b.x0 * state.k;
      state.ty = v.top + (v.h - (b.y1 - b.y0) * state.k) / 2 - b.y0 * state.k;
      applyTransform();
    }
    function zoomAt(factor, cx, cy) {
      const k = Math.max(0.05, Math.min(8, state.k * factor));
      state.tx = cx - (cx - state.tx) * (k / state.k);
      state.ty = cy - (cy - state.ty) * (k / state.k);
      state.k = k;
      state.userMoved = true;
      applyTransform();
    }
    function zoomBy(factor) { zoomAt(factor, (svg.clientWidth || 800) / 2, (svg.clientHeight || 600) / 2); }
    svg.addEventListener("wheel", ev => {
      ev.preventDefault();
      const r = svg.getBoundingClientRect();
      zoomAt(Math.exp(-ev.deltaY * (ev.deltaMode === 1 ? 0.05 : 0.0015)), ev.clientX - r.left, ev.clientY - r.top);
    }, {passive: false});
    let drag = null;
    svg.addEventListener("pointerdown", ev => {
      if (ev.button !== 0) return;
      drag = {x: ev.clientX, y: ev.clientY, tx: state.tx, ty: state.ty, moved: false, id: ev.pointerId};
    });
    svg.addEventListener("pointermove", ev => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!drag.moved) { drag.moved = true; try { svg.setPointerCapture(drag.id); } catch (e) { /* not capturable */ } }
      state.tx = drag.tx + dx; state.ty = drag.ty + dy; state.userMoved = true;
      svg.classList.add("tv-dragging");
      applyTransform();
    });
    const endDrag = () => {
      if (drag && drag.moved) {  // the click that ends a drag selects nothing (it comes in the same task)
        const swallow = ev => ev.stopPropagation();
        svg.addEventListener("click", swallow, {capture: true, once: true});
        setTimeout(() => svg.removeEventListener("click", swallow, {capture: true}), 0);
      }
      drag = null;
      svg.classList.remove("tv-dragging");
    };
    svg.addEventListener("pointerup", endDrag);
    svg.addEventListener("pointercancel", endDrag);
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(() => { if (!state.userMoved && state.model) draw(); }).observe(host);
    } else {
      global.addEventListener("resize", () => { if (!state.userMoved && state.model) draw(); });
    }

    // ---------------------------------------------------------------- drawing
    /**
     * A tree that would fit the window by its height leaves the width unused: spread its columns (up to
     * COLUMN_WIDE apart) until width and height fit together. Only gaps grow, so nothing comes to overlap.
     */
    function widenColumns(pos, b) {
      const size = viewSize();
      const wanted = (b.y1 - b.y0) * size.w / Math.max(1, size.h);
      const columnX = pos.columnX;
      const gaps = columnX.length - 1;
      if (gaps < 1 || wanted <= b.x1 - b.x0) return false;
      const extra = (wanted - (b.x1 - b.x0)) / gaps;
      const shifted = [0];
      for (let d = 1; d <= gaps; d++) {
        const gap = columnX[d] - columnX[d - 1];
        shifted.push(shifted[d - 1] + Math.max(gap, Math.min(gap + extra, COLUMN_WIDE)));
      }
      for (const p of pos.values()) p.x = shifted[p.depth];
      return true;
    }

    function visibleKids(tag) { return state.collapsed.has(tag) ? [] : (state.model.children.get(tag) || []); }

    function shapeOf(tag) {
      const n = state.model.nodes.get(tag);
      const kids = state.model.children.get(tag) || [];
      if (n.kind === "answer") {
        const chip = chipLabel(n.answer);
        n._chip = chip;
        return {half: CHIP_H / 2, width: ANSWER_R + 3 + chip.width};
      }
      const r = radius(n);
      if (state.collapsed.has(tag) && kids.length) {
        const label = "+" + (state.stats.get(tag).size - 1);
        n._badge = {label: label, width: textWidth(label) + 10};
        return {half: Math.max(r, CHIP_H / 2), width: r + 3 + n._badge.width};
      }
      n._badge = null;
      return {half: r, width: r};
    }

    function radius(n) {
      if (n.kind === "answer") return ANSWER_R;
      const v = Math.max(0, Number(n.visits) || 0);
      return Math.max(3.5, Math.min(11, 3 + 1.4 * Math.sqrt(v)));
    }

    function fillOf(n) {
      if (n.kind === "failure") return {fill: "#bdbdbd", opacity: 1};
      if (n.kind === "infrastructure") return {fill: "#fff", opacity: 1};
      if (state.colourBy === "value") return {fill: valueColour(n.value), opacity: 1};
      const s = state.stats.get(n.tag);
      if (!s || !s.best) return {fill: "#fff", opacity: 1};
      return {fill: s.best.colour, opacity: 0.3 + 0.7 * s.share};
    }

    function draw() {
      const model = state.model;
      viewport.replaceChildren();
      empty.hidden = model.root !== null;
      if (model.root === null) { state.bounds = null; return; }
      const shapes = new Map();
      const shape = tag => { if (!shapes.has(tag)) shapes.set(tag, shapeOf(tag)); return shapes.get(tag); };
      const pos = tidyLayout(model.root, visibleKids, shape);
      state.pos = pos;
      const bounds = () => {
        let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
        for (const [tag, p] of pos) {
          const s = shape(tag);
          x0 = Math.min(x0, p.x - s.half); x1 = Math.max(x1, p.x + s.width);
          y0 = Math.min(y0, p.y - s.half); y1 = Math.max(y1, p.y + s.half);
        }
        return {x0: x0, x1: x1 + 4, y0: y0, y1: y1};
      };
      state.bounds = bounds();
      if (widenColumns(pos, state.bounds)) state.bounds = bounds();
      const hlRow = state.highlighted === null ? null : model.rows.find(r => r.key === state.highlighted) || null;
      const hlTags = new Set(hlRow ? hlRow.tags : []);
      const hlPath = new Set();
      for (const tag of hlTags) {
        let n = model.nodes.get(tag);
        while (n && !hlPath.has(n.tag)) {
          hlPath.add(n.tag);
          n = isNil(n.parent) ? null : model.nodes.get(String(n.parent));
        }
      }
      svg.classList.toggle("tv-highlighting", hlRow !== null);
      const edges = svgEl("g", {class: "tv-edges"}, viewport);
      const shapesLayer = svgEl("g", {class: "tv-nodes"}, viewport);
      for (const [tag, p] of pos) {
        const n = model.nodes.get(tag);
        if (isNil(n.parent) || !pos.has(String(n.parent))) continue;
        const q = pos.get(String(n.parent)), rp = radius(model.nodes.get(String(n.parent)));
        const xa = q.x + rp, xb = p.x - radius(n), xm = (xa + xb) / 2;
        const chosen = model.chosen.has(tag);
        const cls = "tv-edge" + (chosen ? " chosen" : "") + (hlPath.has(tag) ? " hl" : "");
        svgEl("path", {d: "M" + xa + "," + q.y + " C" + xm + "," + q.y + " " + xm + "," + p.y + " " + xb + "," + p.y,
                       class: cls, stroke: chosen ? CHOSEN : "#9ca3af", "stroke-width": chosen ? 2.5 : 1,
                       fill: "none"}, edges);
      }
      for (const [tag, p] of pos) {
        const n = model.nodes.get(tag);
        const g = svgEl("g", {class: "tv-node", "data-tag": tag}, shapesLayer);
        if (hlPath.has(tag)) g.classList.add("hl");
        const chosen = model.chosen.has(tag);
        const f = fillOf(n);
        const classes = ["node", "kind-" + n.kind];
        if (!state.first && !state.known.has(tag)) classes.push("fresh");
        if (state.selected === tag) classes.push("selected");
        if (state.collapsed.has(tag)) classes.push("collapsed");
        const row = model.groupOf.get(tag);
        const r = radius(n);
        const circle = svgEl("circle", {cx: p.x, cy: p.y, r: r, class: classes.join(" "), "data-tag": tag,
          fill: n.kind === "answer" && row ? row.colour : f.fill, "fill-opacity": f.opacity,
          stroke: chosen ? CHOSEN : n.kind === "infrastructure" ? "#e08a00" : n.kind === "root" ? "#111" :
            n.status === "code-error" ? ERROR_RING : "#555",
          "stroke-width": chosen ? 2.5 : n.kind === "root" || n.status === "code-error" ? 2 : 1,
          "stroke-dasharray": n.kind === "infrastructure" ? "3,2" : "none"}, g);
        const title = svgEl("title", {}, circle);
        title.textContent = tag + " · " + (n.status || n.kind) +
          (n.terminal && n.terminal !== n.status ? " (" + n.terminal + ")" : "") +
          " · visits " + (isNil(n.visits) ? 0 : n.visits) + " · value " + Number(n.value || 0).toFixed(3);
        if (n.kind === "answer" && n._chip) {
          const colour = row ? row.colour : OTHER;
          const chip = svgEl("g", {class: "chip" + (chosen ? " chosen" : "") + (hlTags.has(tag) ? " hl" : ""),
                                   "data-tag": tag}, g);
          const rect = svgEl("rect", {x: p.x + r + 3, y: p.y - CHIP_H / 2, width: n._chip.width, height: CHIP_H, rx: 4,
            class: "chip", fill: colour, stroke: chosen ? CHOSEN : "rgba(0,0,0,0.25)", "stroke-width": chosen ? 2 : 1,
            "data-tag": tag}, chip);
          const t = svgEl("text", {x: p.x + r + 8, y: p.y + 3.6, class: "chip-text", fill: textOn(colour)}, chip);
          t.textContent = n._chip.label;
          const full = svgEl("title", {}, rect);
          full.textContent = String(isNil(n.answer) ? "" : n.answer) + (row ? "  (" + row.count + " votes)" : "");
          chip.addEventListener("click", () => select(tag));
        } else if (n._badge) {
          const bx = p.x + r + 3;
          svgEl("rect", {x: bx, y: p.y - CHIP_H / 2, width: n._badge.width, height: CHIP_H, rx: 7, class: "badge",
                         fill: "#f3f4f6", stroke: "#9ca3af"}, g);
          const t = svgEl("text", {x: bx + 5, y: p.y + 3.6, class: "badge-text"}, g);
          t.textContent = n._badge.label;
        }
        g.addEventListener("click", ev => {
          if (!(ev.target.closest && ev.target.closest(".chip"))) select(tag);  // a chip selects by itself
        });
        g.addEventListener("dblclick", ev => { ev.preventDefault(); toggle(tag); });
      }
      state.known = new Set(model.nodes.keys());
      state.first = false;
      if (!state.userMoved) fit(); else applyTransform();
    }

    // ---------------------------------------------------------------- header, vote table, side panel
    function drawHeader() {
      const header = opts.header;
      if (!header) return;
      const data = state.data, model = state.model;
      header.replaceChildren();
      if (opts.question !== false) {
        htmlEl("h1", "tv-question", data.question || data.task_id || "Search tree", header);
        const meta = [];
        if (data.task_id) meta.push("task " + data.task_id);
        if (data.summary) meta.push(data.summary);
        if (meta.length) htmlEl("p", "tv-meta muted", meta.join(" · "), header);
      }
      const decision = htmlEl("p", "tv-decision", null, header);
      const total = model.rows.reduce((a, r) => a + r.count, 0);
      const answer = isNil(data.answer) ? null : String(data.answer);
      if (answer === null) {
        const none = data.final ? "No answer found." : "No answer yet.";
        decision.appendChild(document.createTextNode(total ? "Leading answer so far: " : none));
        if (total) htmlEl("b", "tv-answer", model.rows[0].answer, decision);
      } else {
        decision.appendChild(document.createTextNode((data.final ? "Answer " : "Leading answer ")));
        htmlEl("b", "tv-answer", answer, decision);
      }
      const row = model.rows.find(r => r.tags.indexOf(String(data.chosen_tag)) >= 0) ||
        (answer === null ? model.rows[0] : null);
      let how = "";
      if (data.decided_by === "value") {
        const chosen = model.nodes.get(String(data.chosen_tag));
        how = "decided by value (Q " + Number(chosen ? chosen.value : 0).toFixed(3) + ")" +
          (row ? "; its group has " + row.count + " of " + total + " votes" : "");
      } else if (row && total) {
        how = (data.decided_by === "vote" ? "decided by vote: " : "vote so far: ") + row.count + " of " + total +
          " votes (" + Math.round(100 * row.count / total) + " %)";
        const tied = model.rows.filter(r => r !== row && r.count === row.count);
        if (tied.length && !model.provisional) {
          how += "; a tie with " + tied.map(r => r.key).join(", ") +
            ", won on the higher mean value, then the earlier answer";
        }
      }
      if (how) htmlEl("span", "tv-how muted", " — " + how, decision);
      if (!isNil(data.label)) {
        const lab = htmlEl("p", "tv-label", "label ", header);
        htmlEl("code", null, data.label, lab);
        if (!isNil(data.correct)) {
          htmlEl("span", data.correct ? "tv-ok" : "tv-bad", data.correct ? "  ✓ correct" : "  ✗ wrong", lab);
        }
      }
      if (!model.rows.length) return;
      const table = htmlEl("table", "tv-vote", null, header);
      const head = htmlEl("tr", null, null, htmlEl("thead", null, null, table));
      for (const h of ["", model.provisional ? "answer" : "answer (normalised)", "votes", "label"]) {
        htmlEl("th", null, h, head);
      }
      const body = htmlEl("tbody", null, null, table);
      for (const r of model.rows) {
        const tr = htmlEl("tr", "tv-vote-row", null, body);
        tr.dataset.key = r.key;
        if (state.highlighted === r.key) tr.classList.add("active");
        const sw = htmlEl("i", "tv-swatch", null, htmlEl("td", null, null, tr));
        sw.style.background = r.colour;
        const ans = htmlEl("td", "tv-vote-key", r.key, tr);
        ans.title = r.answer;
        htmlEl("td", "tv-vote-count", r.count, tr);
        htmlEl("td", "tv-vote-match", r.matches === null ? "–" : r.matches ? "✓" : "✗", tr);
        tr.addEventListener("click", () => highlight(state.highlighted === r.key ? null : r.key));
        tr.title = "Click: highlight this answer's nodes";
      }
      if (model.provisional && model.rows.length) {
        htmlEl("p", "tv-note muted", "Grouped by the answers' text while the search runs; the normalised vote " +
          "comes with the finished tree.", header);
      }
    }

    function section(parent, label, value) {
      if (isNil(value) || value === "") return;
      htmlEl("div", "label", label, parent);
      htmlEl("pre", null, value, parent);
    }

    function drawDetail() {
      const d = opts.detail;
      if (!d) return;
      d.replaceChildren();
      const n = state.selected === null ? null : state.model.nodes.get(state.selected);
      if (!n) {
        htmlEl("p", "muted", "Click a node to read its thought, cell and output.", d);
        return;
      }
      const stats = ["depth " + (isNil(n.depth) ? "?" : n.depth), "visits " + (isNil(n.visits) ? 0 : n.visits),
                     "value " + Number(n.value || 0).toFixed(4)];
      if (!isNil(n.prior)) stats.push("prior " + n.prior);
      if (!isNil(n.multiplicity) && n.multiplicity > 1) stats.push("sampled " + n.multiplicity + "×");
      if (!isNil(n.evaluation)) stats.push("evaluation " + n.evaluation);
      section(d, "Node", n.tag + "  status: " + (n.status || n.kind) + (n.terminal ? "  terminal: " + n.terminal : "") +
        "\n" + stats.join("  "));
      const row = state.model.groupOf.get(n.tag);
      section(d, "Answer", n.answer);
      if (row) section(d, "Answer group", row.key + "  (" + row.count + " votes" +
        (row.matches === null ? "" : row.matches ? ", matches the label" : ", not the label") + ")");
      section(d, "Thought", n.thought);
      section(d, "Cell", n.code);
      section(d, "Output", n.observation);
      section(d, "Reply", n.reply);
      const kids = state.model.children.get(n.tag) || [];
      if (kids.length) {
        const label = state.collapsed.has(n.tag) ? "expand subtree" : "collapse subtree";
        const b = htmlEl("button", "tv-btn tv-toggle", label, d);
        b.type = "button";
        b.addEventListener("click", () => toggle(n.tag));
      }
    }

    // ---------------------------------------------------------------- actions
    function select(tag) {
      // classes only, no redraw: the shapes stay the same elements, so a double-click still lands on them
      state.selected = tag;
      for (const c of viewport.querySelectorAll("circle.node")) {
        c.classList.toggle("selected", c.getAttribute("data-tag") === tag);
      }
      drawDetail();
      if (opts.onSelect) opts.onSelect(state.model.nodes.get(tag));
    }
    function toggle(tag) {
      if (!(state.model.children.get(tag) || []).length) return;
      if (state.collapsed.has(tag)) state.collapsed.delete(tag); else state.collapsed.add(tag);
      draw();
      drawDetail();
    }
    function expandAll() { state.collapsed.clear(); draw(); drawDetail(); }
    function highlight(key) {
      state.highlighted = key;
      draw();
      drawHeader();
    }
    function render(data) {
      state.data = data || {nodes: []};
      state.model = buildModel(state.data);
      state.stats = subtreeStats(state.model);
      for (const tag of Array.from(state.collapsed)) if (!state.model.nodes.has(tag)) state.collapsed.delete(tag);
      if (state.selected !== null && !state.model.nodes.has(state.selected)) state.selected = null;
      if (state.highlighted !== null && !state.model.rows.some(r => r.key === state.highlighted)) {
        state.highlighted = null;
      }
      // "final": the engine's normalised vote is on screen; "live": answers grouped by their text so far
      host.dataset.view = state.model.provisional ? "live" : "final";
      colourSelect.parentNode.hidden = !state.model.hasValues;
      if (!state.model.hasValues && state.colourBy === "value") {
        state.colourBy = "answer";
        colourSelect.value = "answer";
      }
      draw();
      drawHeader();
      drawDetail();
    }
    function reset() {
      state.collapsed.clear(); state.selected = null; state.highlighted = null; state.known = new Set();
      state.first = true; state.userMoved = false;
    }
    return {render: render, fit: () => { state.userMoved = false; fit(); }, select: select, toggle: toggle,
            highlight: highlight, expandAll: expandAll, reset: reset,
            layout: () => state.pos};
  }

  global.JupiterTreeView = {create: create, tidyLayout: tidyLayout, shortAnswer: shortAnswer};
})(typeof window !== "undefined" ? window : this);
