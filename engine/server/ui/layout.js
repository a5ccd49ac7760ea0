// Layered drawings as SVG: the run's DAG (columns = the graph's layers) and a node's
// machine (columns = distance from the initial state). A few barycenter sweeps order each
// column to cut crossings; edges are curves, backward and same-column ones bow below.

import { s } from "./dom.js";

const CHAR = 7.2; // average width of a 12 px sans-serif character
const GAP_X = 44;
const GAP_Y = 18;
const LABEL_MAX = 30; // longer edge labels are cut; the whole text is in their tooltip
const SUB_MAX = 22; // the same for a DAG node's "machine · state" line
const PAD = 10; // inside the box around a plan's children
const CAPTION = 24; // the height of that box's caption
const WRAP = 10; // a column of a plan's children continues in the next after this many

/** `text` cut to `max` characters with an ellipsis. */
export function cut(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
let drawings = 0; // unique marker ids when several SVGs share the page

/** Ranks of a machine's states: shortest distance from the initial state. */
export function machineRanks(machine) {
  const rank = new Map([[machine.initial, 0]]);
  const queue = [machine.initial];
  while (queue.length) {
    const state = queue.shift();
    for (const t of machine.transitions) {
      if (t.source.includes(state) && !rank.has(t.dest)) {
        rank.set(t.dest, rank.get(state) + 1);
        queue.push(t.dest);
      }
    }
  }
  const deepest = Math.max(0, ...rank.values());
  for (const state of machine.states) if (!rank.has(state.name)) rank.set(state.name, deepest + 1);
  return rank;
}

/** Columns of ids ordered to reduce crossings. */
function order(ids, rank, edges) {
  const columns = [];
  for (const id of ids) (columns[rank.get(id)] ||= []).push(id);
  const filled = columns.filter(Boolean);
  const position = new Map();
  const place = () => filled.forEach((col) => col.forEach((id, i) => position.set(id, i)));
  place();
  const mean = (list) => (list.length ? list.reduce((a, b) => a + b, 0) / list.length : null);
  for (let sweep = 0; sweep < 4; sweep++) {
    const forward = sweep % 2 === 0;
    const sequence = forward ? filled : [...filled].reverse();
    for (const col of sequence.slice(1)) {
      const weight = new Map();
      for (const id of col) {
        const near = edges
          .filter(([a, b]) => (forward ? b === id && a !== id : a === id && b !== id))
          .map(([a, b]) => position.get(forward ? a : b));
        weight.set(id, mean(near) ?? position.get(id));
      }
      col.sort((a, b) => weight.get(a) - weight.get(b));
      col.forEach((id, i) => position.set(id, i));
    }
  }
  return filled;
}

/** An item's box size: its own `size`, or what its lines of text need. */
function sizeOf(item) {
  if (item.size) return item.size;
  return { w: Math.max(...item.lines.map((l) => l.length)) * CHAR + 22, h: 10 + item.lines.length * 16 };
}

/** A column cut into runs of at most `wrap` ids, of even length. */
function wrapped(column, wrap) {
  if (column.length <= wrap) return [column];
  const runs = Math.ceil(column.length / wrap);
  const each = Math.ceil(column.length / runs);
  return Array.from({ length: runs }, (_, i) => column.slice(i * each, (i + 1) * each));
}

/**
 * Lay out boxes: items = [{id, lines: [text…]} or {id, size: {w, h}}], edges = [[from, to,
 * label]], rank = Map. Boxes of text in a column share its width; sized ones keep theirs.
 * A column longer than `wrap` continues in the next. The gap after a column is wide
 * enough for the labels of the edges leaving it.
 * Returns {box: Map(id → {x, y, w, h})}.
 */
function place(items, edges, rank, top, wrap = Infinity) {
  const byId = new Map(items.map((item) => [item.id, item]));
  const size = new Map(items.map((item) => [item.id, sizeOf(item)]));
  const columns = order(items.map((i) => i.id), rank, edges).flatMap((col) => wrapped(col, wrap));
  const box = new Map();
  const heights = columns.map((col) => col.reduce((sum, id) => sum + size.get(id).h + GAP_Y, -GAP_Y));
  const tallest = Math.max(...heights, 0);
  const column = new Map();
  columns.forEach((col, c) => col.forEach((id) => column.set(id, c)));
  let x = 0;
  columns.forEach((col, c) => {
    const text = Math.max(0, ...col.filter((id) => !byId.get(id).size).map((id) => size.get(id).w));
    let y = top + (tallest - heights[c]) / 2;
    let widest = 0;
    for (const id of col) {
      const w = byId.get(id).size ? size.get(id).w : text;
      box.set(id, { x, y, w, h: size.get(id).h });
      y += size.get(id).h + GAP_Y;
      widest = Math.max(widest, w);
    }
    const labels = edges
      .filter(([a, b]) => column.get(a) === c && column.get(b) > c)
      .map(([, , l]) => Math.min((l || "").length, LABEL_MAX));
    x += widest + Math.max(GAP_X, Math.max(0, ...labels) * CHAR * 0.92 + 24);
  });
  return { box };
}

/** Lay out a long, narrow DAG top to bottom instead: one row per layer, boxes of one width. */
function placeRows(items, edges, rank) {
  const rows = order(items.map((i) => i.id), rank, edges);
  const w = Math.max(...items.map((i) => Math.max(...i.lines.map((l) => l.length)) * CHAR + 22));
  const hgt = 10 + 2 * 16;
  const widths = rows.map((row) => row.length * (w + 24) - 24);
  const widest = Math.max(...widths, 0);
  const box = new Map();
  rows.forEach((row, r) => {
    let x = 64 + (widest - widths[r]) / 2;
    for (const id of row) {
      box.set(id, { x, y: r * (hgt + 34), w, h: hgt });
      x += w + 24;
    }
  });
  return { box, vertical: true };
}

function curve(from, to, bow, vertical) {
  if (vertical && to.y > from.y) {
    const x1 = from.x + from.w / 2;
    const y1 = from.y + from.h;
    const x2 = to.x + to.w / 2;
    const y2 = to.y;
    const mid = (y1 + y2) / 2;
    return { d: `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${y2}`, lx: (x1 + x2) / 2, ly: mid };
  }
  if (from === to) {
    const x = from.x + from.w / 2;
    return { d: `M${x - 10},${from.y} C${x - 26},${from.y - 30} ${x + 26},${from.y - 30} ${x + 10},${from.y}`, lx: x, ly: from.y - 27 };
  }
  if (to.x > from.x) {
    const x1 = from.x + from.w;
    const y1 = from.y + from.h / 2;
    const x2 = to.x;
    const y2 = to.y + to.h / 2;
    const mid = (x1 + x2) / 2;
    return { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, lx: mid, ly: (y1 + y2) / 2 - 4 };
  }
  if (to.x === from.x) {
    // Within one column: out of the right side, bow right, back into the right side.
    const x = from.x + Math.max(from.w, to.w);
    const y1 = from.y + from.h / 2;
    const y2 = to.y + to.h / 2;
    const out = x + 30 + bow * 10;
    return { d: `M${from.x + from.w},${y1} C${out},${y1} ${out},${y2} ${to.x + to.w},${y2}`, lx: out - 4, ly: (y1 + y2) / 2 + 4, anchor: "start" };
  }
  // Backward: leave from the bottom, bow below, enter from the bottom.
  const x1 = from.x + from.w / 2;
  const y1 = from.y + from.h;
  const x2 = to.x + to.w / 2;
  const y2 = to.y + to.h;
  const depth = Math.max(y1, y2) + 26 + bow * 14;
  return { d: `M${x1},${y1} C${x1},${depth} ${x2},${depth} ${x2},${y2}`, lx: (x1 + x2) / 2, ly: depth - 3 };
}

/** An SVG with an arrowhead marker; `finish(extent)` sizes it to what was drawn. */
function svgFrame(label) {
  const id = `arrow${++drawings}`;
  const svg = s("svg", { class: "diagram", role: "group", "aria-label": label });
  svg.append(
    s("defs", {}, s("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))),
  );
  const finish = (extent) => {
    const x = Math.floor(extent.x1 - 8);
    const y = Math.floor(extent.y1 - 8);
    const w = Math.ceil(extent.x2 - x + 8);
    const hgt = Math.ceil(extent.y2 - y + 8);
    svg.setAttribute("viewBox", `${x} ${y} ${w} ${hgt}`);
    svg.setAttribute("width", w);
    svg.setAttribute("height", hgt);
  };
  return { svg, marker: `url(#${id})`, finish };
}

/** The extent of the boxes, grown by `grow`. */
function extentOf(layout) {
  const extent = { x1: Infinity, y1: Infinity, x2: -Infinity, y2: -Infinity };
  for (const b of layout.box.values()) grow(extent, b.x, b.y, b.x + b.w, b.y + b.h);
  if (!layout.box.size) grow(extent, 0, 0, 100, 40);
  return extent;
}

function grow(extent, x1, y1, x2, y2) {
  extent.x1 = Math.min(extent.x1, x1);
  extent.y1 = Math.min(extent.y1, y1);
  extent.x2 = Math.max(extent.x2, x2);
  extent.y2 = Math.max(extent.y2, y2);
}

function drawEdges(svg, layout, edges, marker, extent) {
  let bows = 0;
  for (const [a, b, label] of edges) {
    const from = layout.box.get(a);
    const to = layout.box.get(b);
    if (!from || !to) continue;
    const backward = a !== b && (layout.vertical ? to.y <= from.y : to.x <= from.x);
    const path = curve(from, to, backward ? bows++ : 0, layout.vertical);
    svg.append(s("path", { d: path.d, class: `edge${backward ? " back" : ""}`, "marker-end": marker }));
    if (backward) grow(extent, path.lx, path.ly - 20, path.lx + 40, path.ly + 8);
    if (label) {
      const anchor = path.anchor || "middle";
      const shown = cut(label, LABEL_MAX);
      svg.append(s("text", { x: path.lx, y: path.ly, class: "edge-label", "text-anchor": anchor },
        s("title", {}, label), shown));
      const width = shown.length * CHAR * 0.92;
      const left = anchor === "start" ? path.lx : path.lx - width / 2;
      grow(extent, left, path.ly - 12, left + width, path.ly + 4);
    }
  }
}

/** Node id → the ids of its plan's children (every child it made), in layer order. */
function childrenOf(shape, ids) {
  const kids = new Map();
  for (const id of ids) if (shape.nodes[id].plan) kids.set(id, []);
  for (const id of ids) {
    const parent = shape.nodes[id].parent;
    if (!parent || !shape.nodes[parent]) continue;
    if (!kids.has(parent)) kids.set(parent, []);
    kids.get(parent).push(id);
  }
  return kids;
}

/** Ranks of sibling ids (given in layer order): the longest path to each through `edges`. */
function ranksOf(ids, edges) {
  const rank = new Map(ids.map((id) => [id, 0]));
  const needs = new Map(ids.map((id) => [id, []]));
  for (const [a, b] of edges) needs.get(b).push(a);
  for (const id of ids) rank.set(id, Math.max(0, ...needs.get(id).map((a) => rank.get(a) + 1)));
  return rank;
}

const shift = (b, dx, dy) => ({ x: b.x + dx, y: b.y + dy, w: b.w, h: b.h });

/**
 * Lay out sibling nodes (the graph's own, or one plan's children) in columns. A node with
 * a plan becomes a box holding its own box, then its children laid out the same way.
 * Only edges between siblings are drawn: an edge into or out of a plan's node meets the
 * box around its children (a child also needs what its parent needs, and what needs
 * the parent waits for every child).
 * Returns {w, h, nodes: Map(id → box), plans: Map(parent → box), edges}, from (0, top).
 */
function arrange(ids, parts, top, wrap) {
  const inner = new Map();
  const items = ids.map((id) => {
    const item = parts.itemOf(id);
    if (!parts.kids.has(id)) return item;
    const group = arrange(parts.kids.get(id), parts, 0, WRAP);
    inner.set(id, group);
    const own = sizeOf(item);
    const w = Math.max(PAD + own.w + (group.w ? GAP_X + group.w : 0) + PAD, parts.caption(id).length * CHAR + 2 * PAD);
    return { id, size: { w, h: CAPTION + Math.max(own.h, group.h) + PAD } };
  });
  const siblings = new Set(ids);
  const edges = ids.flatMap((id) => parts.needsOf(id).filter((need) => siblings.has(need)).map((need) => [need, id, ""]));
  const { box } = place(items, edges, ranksOf(ids, edges), top, wrap);
  const nodes = new Map();
  const plans = new Map();
  const all = [...edges];
  for (const id of ids) {
    const b = box.get(id);
    const group = inner.get(id);
    if (!group) {
      nodes.set(id, b);
      continue;
    }
    plans.set(id, b);
    const own = sizeOf(parts.itemOf(id));
    nodes.set(id, { x: b.x + PAD, y: b.y + CAPTION, w: own.w, h: own.h });
    const dx = b.x + PAD + own.w + GAP_X;
    for (const [key, value] of group.nodes) nodes.set(key, shift(value, dx, b.y + CAPTION));
    for (const [key, value] of group.plans) plans.set(key, shift(value, dx, b.y + CAPTION));
    all.push(...group.edges);
  }
  const boxes = [...box.values()];
  const w = Math.max(0, ...boxes.map((b) => b.x + b.w));
  const h = Math.max(0, ...boxes.map((b) => b.y + b.h - top));
  return { w, h, nodes, plans, edges: all };
}

/**
 * The children a plan's current version no longer counts (one that failed before a
 * revision, or was dropped before it started): child id → the version that left it out.
 */
function supersededIn(shape, kids) {
  const found = new Map();
  for (const [parent, children] of kids) {
    const plan = shape.nodes[parent].plan;
    if (!plan) continue;
    const members = new Set(plan.members);
    for (const id of children) if (!members.has(id)) found.set(id, plan.version);
  }
  return found;
}

/** A plan's caption: "phases · plan v2 · 4 children, 1 superseded · at most 2 at once". */
function planCaption(shape, parent, superseded) {
  const plan = shape.nodes[parent].plan;
  if (!plan) return `${parent} · plan`;
  const count = `${plan.members.length} ${plan.members.length === 1 ? "child" : "children"}`;
  return [`${parent} · plan v${plan.version}`, superseded ? `${count}, ${superseded} superseded` : count,
    plan.limit ? `at most ${plan.limit} at once` : ""].filter(Boolean).join(" · ");
}

/** Where each node goes: in layers (a long chain top to bottom), or with plans' boxes. */
function layoutDag(shape, parts, top) {
  const widest = Math.max(0, ...shape.layers.map((layer) => layer.length));
  if (!parts.kids.size && shape.layers.length > 5 && shape.layers.length > 2 * widest) {
    // A long chain reads better top to bottom than as a strip wider than the screen.
    const rank = new Map();
    shape.layers.forEach((layer, i) => layer.forEach((id) => rank.set(id, i)));
    const edges = top.flatMap((id) => parts.needsOf(id).map((need) => [need, id, ""]));
    const { box } = placeRows(top.map(parts.itemOf), edges, rank);
    return { nodes: box, plans: new Map(), edges, vertical: true };
  }
  // Room above the columns for their layer labels, when columns are the graph's layers.
  return { ...arrange(top, parts, parts.kids.size ? 0 : 24, Infinity), vertical: false };
}

function drawLayerLabels(svg, shape, layout, extent) {
  shape.layers.forEach((layer, i) => {
    const first = layout.nodes.get(layer[0]);
    if (!first) return;
    if (layout.vertical) svg.append(s("text", { x: 0, y: first.y + first.h / 2 + 4, class: "layer-label" }, `layer ${i}`));
    else svg.append(s("text", { x: first.x, y: 12, class: "layer-label" }, `layer ${i}`));
  });
  grow(extent, 0, layout.vertical ? extent.y1 : 0, 0, 0);
}

/** A node's box, a button: {group, title, second} (its tooltip and "machine · state" line). */
function nodeBox(id, b, text, onPick) {
  const title = s("title");
  const second = s("text", { x: b.x + 10, y: b.y + 37, class: "node-sub" });
  const group = s("g", { class: "node", tabindex: 0, role: "button", "data-node": id,
    onclick: () => onPick(id),
    onkeydown: (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        onPick(id);
      }
    } },
  title,
  s("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 7 }),
  s("text", { x: b.x + 10, y: b.y + 19, class: "node-id" }, text),
  second);
  return { group, title, second };
}

/**
 * The run's DAG. nodes: {id: {machine, needs, parent, plan}}, layers: [[id…]…];
 * view(id) → {status, state}. A plan's children are drawn in a box beside their parent,
 * captioned with the parent and the plan's version; each is a node like any other.
 * onPick(id) is called on click or Enter/Space. Returns {svg, update(view), select(id)}.
 */
export function drawDag(shape, view, onPick) {
  const ids = shape.layers.flat();
  const kids = childrenOf(shape, ids);
  const top = ids.filter((id) => !kids.has(shape.nodes[id].parent));
  const superseded = supersededIn(shape, kids);
  const captions = new Map([...kids].map(([parent, children]) =>
    [parent, planCaption(shape, parent, children.filter((id) => superseded.has(id)).length)]));
  const sub = (id, state) => `${shape.nodes[id].machine} · ${state || "—"}`;
  // A child is named within its plan's box by its item id: the box names the parent.
  const label = (id) => {
    const parent = shape.nodes[id].parent;
    return kids.has(parent) && id.startsWith(`${parent}.`) ? id.slice(parent.length + 1) : id;
  };
  // Wide enough for the node's longest state (up to SUB_MAX), so boxes keep their size.
  const itemOf = (id) => ({ id, lines: [label(id), cut(sub(id, longestState(shape, id)), SUB_MAX)] });
  const needsOf = (id) => shape.nodes[id].needs;
  const layout = layoutDag(shape, { kids, itemOf, needsOf, caption: (id) => captions.get(id) }, top);
  const anchors = { box: new Map([...layout.nodes, ...layout.plans]), vertical: layout.vertical };
  const { svg, marker, finish } = svgFrame(kids.size
    ? "The run's graph: a plan's children are grouped in a box beside the node whose plan made them"
    : `The run's graph: one ${layout.vertical ? "row" : "column"} per layer`);
  const extent = extentOf(anchors);
  if (!kids.size) drawLayerLabels(svg, shape, layout, extent); // with plans, columns are no layers
  for (const [parent, b] of layout.plans) {
    // Behind the edges and nodes: the box, and its caption (read out by the children's group).
    svg.append(s("g", { class: "plan", "data-plan": parent, "aria-hidden": "true" },
      s("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 10 }),
      s("text", { x: b.x + PAD, y: b.y + 15, class: "plan-label" }, captions.get(parent))));
  }
  drawEdges(svg, anchors, layout.edges, marker, extent);
  const groups = new Map();
  // In reading order: a node, then the group of its plan's children (each a node too).
  const emit = (list) => list.flatMap((id) => {
    const parts = nodeBox(id, layout.nodes.get(id), label(id), onPick);
    groups.set(id, { ...parts, superseded: superseded.get(id) });
    if (!kids.has(id)) return [parts.group];
    return [parts.group, s("g", { class: "plan-members", "data-plan": id, role: "group", "aria-label": captions.get(id) }, emit(kids.get(id)))];
  });
  svg.append(...emit(top));
  const update = (viewOf) => {
    for (const [id, parts] of groups) {
      const v = viewOf(id);
      const dropped = parts.superseded ? `, not in plan v${parts.superseded}` : "";
      parts.group.setAttribute("class", `node st-${v.status}${parts.superseded ? " superseded" : ""}`);
      parts.group.setAttribute("aria-label", `node ${id}: ${v.status}, state ${v.state || "none"}${dropped}`);
      parts.title.textContent = `${id}: ${v.status}${v.outcome ? ` (${v.outcome})` : ""}, ${sub(id, v.state)}${dropped}`;
      parts.second.textContent = cut(sub(id, v.state), SUB_MAX);
    }
  };
  const select = (picked) => {
    for (const [id, parts] of groups) parts.group.classList.toggle("picked", id === picked);
  };
  update(view);
  finish(extent);
  return { svg, update, select };
}

function longestState(shape, id) {
  const machine = shape.machines[shape.nodes[id].machine];
  if (!machine) return "—";
  return machine.states.map((st) => st.name).reduce((a, b) => (b.length > a.length ? b : a), "—");
}

function guardText(t) {
  const parts = [...t.conditions, ...t.unless.map((c) => `not ${c}`)];
  return parts.length ? ` [${parts.join(", ")}]` : "";
}

/** A machine's diagram with `current` highlighted and `visited` states marked. */
export function drawMachine(name, machine, current, visited = new Set()) {
  const rank = machineRanks(machine);
  const items = machine.states.map((st) => ({
    id: st.name,
    lines: [st.name, st.final ? `final: ${st.final}` : st.machine ? `runs ${st.machine}` : st.hook ? `hook ${st.hook}` : ""].filter(Boolean),
  }));
  const merged = new Map();
  for (const t of machine.transitions) {
    for (const source of t.source) {
      const key = `${source}\u0000${t.dest}`;
      const label = `${t.trigger}${guardText(t)}`;
      merged.set(key, merged.has(key) ? `${merged.get(key)}, ${label}` : label);
    }
  }
  const edges = [...merged].map(([key, label]) => [...key.split("\u0000"), label]);
  const layout = place(items, edges, rank, 0);
  const { svg, marker, finish } = svgFrame(`Machine ${name}; current state ${current || "none"}`);
  const extent = extentOf(layout);
  drawEdges(svg, layout, edges, marker, extent);
  const start = layout.box.get(machine.initial);
  if (start) {
    // The initial state: a dot with an arrow into its left side.
    const y = start.y + start.h / 2;
    svg.append(s("circle", { cx: start.x - 22, cy: y, r: 4, class: "start" }));
    svg.append(s("path", { d: `M${start.x - 18},${y} L${start.x},${y}`, class: "edge", "marker-end": marker }));
    grow(extent, start.x - 28, y, start.x, y);
  }
  for (const st of machine.states) {
    const b = layout.box.get(st.name);
    const classes = ["state"];
    if (st.final) classes.push(`final fin-${st.final}`);
    if (visited.has(st.name)) classes.push("visited");
    if (st.name === current) classes.push("current");
    const group = s("g", { class: classes.join(" ") },
      s("title", {}, st.description || st.name),
      s("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 10 }),
      s("text", { x: b.x + 10, y: b.y + 19, class: "node-id" }, st.name));
    if (st.final) group.append(s("rect", { x: b.x + 3, y: b.y + 3, width: b.w - 6, height: b.h - 6, rx: 8, class: "inner" }));
    const sub = items.find((i) => i.id === st.name).lines[1];
    if (sub) group.append(s("text", { x: b.x + 10, y: b.y + 37, class: "node-sub" }, sub));
    svg.append(group);
  }
  finish(extent);
  return svg;
}

