// Plans made at run time, as the viewer tells them, rebuilt from the steps shown: each
// version a node's `expand` step committed (the children it made, kept and dropped), each
// plan refused with the feedback its planner was given, and how each version ended (its
// `join` step); and the result a plan's child handed its parent. Everything from a run
// is set as text: nothing it holds is read as markup.

import { h, json } from "./dom.js";

/**
 * The plans of `node` in `records` (ascending seq), oldest first: {type: "version", seq,
 * version, members, made, kept, dropped, limit, ended: {seq, trigger, message} | null} and
 * {type: "refused", seq, feedback}. Children are item ids, as the plan names them.
 */
export function planVersionsOf(records, node) {
  const entries = [];
  let current = null;
  for (const record of records) {
    if (record.node !== node) continue;
    if (record.kind === "expand" && record.plan) {
      const plan = record.plan;
      const made = plan.items.filter((item) => item.version === plan.version).map((item) => item.id);
      const previous = current ? current.members : [];
      current = {
        type: "version",
        seq: record.seq,
        version: plan.version,
        members: plan.members,
        made,
        kept: plan.members.filter((id) => !made.includes(id)),
        dropped: previous.filter((id) => !plan.members.includes(id)),
        limit: plan.limit,
        ended: null,
      };
      entries.push(current);
    }
    for (const event of record.events || []) {
      if (event.kind === "plan_refused") entries.push({ type: "refused", seq: record.seq, feedback: String(event.feedback || "") });
      if (event.kind === "plan_joined" && current && event.version === current.version) {
        const payload = (record.result && record.result.payload) || {};
        current.ended = { seq: record.seq, trigger: event.trigger, message: payload.message };
      }
    }
  }
  return entries;
}

/** A change of the list below: a key that differs whenever what it shows does. */
export const planKey = (entries) =>
  entries.map((e) => `${e.type}${e.seq}${e.ended ? `+${e.ended.seq}` : ""}`).join(",");

function childList(label, parent, ids, onPick) {
  return h("span", { class: "plan-children" }, `${label} `, ids.map((id, i) => [i ? ", " : "",
    h("button", { type: "button", class: "link mono", "data-child": `${parent}.${id}`, title: `show node ${parent}.${id}`,
      onclick: () => onPick(`${parent}.${id}`) }, id)]));
}

function versionRow(entry, parent, onPick) {
  const count = `${entry.members.length} ${entry.members.length === 1 ? "child" : "children"}`;
  const ended = entry.ended
    ? [h("strong", {}, entry.ended.trigger), ` at step ${entry.ended.seq}`, entry.ended.message ? h("div", { class: "small" }, entry.ended.message) : ""]
    : h("span", { class: "muted" }, "running");
  const lists = [["new:", entry.made], ["kept:", entry.kept], ["dropped:", entry.dropped]]
    .filter(([, ids]) => ids.length)
    .map(([label, ids], i) => [i ? " · " : "", childList(label, parent, ids, onPick)]);
  return h("tr", { class: "plan-version", "data-version": entry.version },
    h("td", { class: "num" }, String(entry.seq)),
    h("th", { scope: "row" }, `v${entry.version}`),
    h("td", {}, count, entry.limit ? ` (at most ${entry.limit} at once)` : "", h("div", { class: "small" }, lists)),
    h("td", {}, ended));
}

function refusedRow(entry) {
  return h("tr", { class: "plan-refused" },
    h("td", { class: "num" }, String(entry.seq)),
    h("th", { scope: "row" }, "refused"),
    h("td", { colspan: 2 }, h("div", { class: "feedback" }, entry.feedback)));
}

/**
 * The node panel's plan section for `parent`: its current plan (`plan`, from the graph's
 * shape, or null before it made one), then every version and refusal in `entries`.
 * `onPick(id)` shows a child; `partial` says steps before those loaded are not shown.
 */
export function renderPlanVersions(parent, plan, entries, { onPick, partial }) {
  const now = plan
    ? `Plan version ${plan.version}: ${plan.members.length} ${plan.members.length === 1 ? "child" : "children"} now${plan.limit ? `, at most ${plan.limit} running at once` : ""}.`
    : "No plan yet.";
  return h("div", { class: "plan-versions" },
    h("h3", {}, "Plan versions"),
    h("p", {}, now),
    partial ? h("p", { class: "muted small" }, "Plans of steps before those loaded are not shown: use “Show earlier steps”.") : "",
    entries.length
      ? h("div", { class: "table-wrap" }, h("table", { class: "plans" },
        h("thead", {}, h("tr", {}, ["Step", "Plan", "Children", "Ended"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, entries.map((entry) => (entry.type === "version" ? versionRow(entry, parent, onPick) : refusedRow(entry))))))
      : h("p", { class: "muted" }, "No plan among the steps shown."));
}

/**
 * What the child `node` handed its parent (`result:`), from the latest step in `records`
 * that moved it: {found: false} when none of them did.
 */
export function resultOf(records, node) {
  for (let i = records.length - 1; i >= 0; i--) {
    const moved = records[i].nodes && records[i].nodes[node];
    if (moved) return { found: true, value: moved.result === undefined ? null : moved.result };
  }
  return { found: false, value: null };
}

/** The node panel's facts of a plan's child: its parent (a link) and its result. */
export function childFacts(parent, result, onPick) {
  const value = !result.found
    ? h("span", { class: "muted" }, "in a step before those loaded")
    : result.value === null ? h("span", { class: "muted" }, "none") : json(result.value, 4000);
  return [
    h("dt", {}, "plan of"), h("dd", {}, h("button", { type: "button", class: "link mono", onclick: () => onPick(parent) }, parent)),
    h("dt", {}, "result"), h("dd", { class: "child-result" }, value),
  ];
}
