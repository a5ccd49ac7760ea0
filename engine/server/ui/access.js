// Who the viewer's user is (GET /whoami) and what their scopes allow. A control the
// scopes do not allow is shown disabled with the reason next to it, so a missing button
// never looks like a bug ("answering gates needs gates:answer"). A gate that names its
// reviewers is offered only to them ("only alice or members of release may answer this
// gate"), as the server holds every signed-in principal to them.

import { api } from "./api.js";
import { h } from "./dom.js";

const DOING = {
  "runs:read": "reading runs",
  "runs:start": "starting runs",
  "gates:answer": "answering gates",
  "runs:resume": "resuming runs",
  "runs:cancel": "cancelling runs",
  "runs:fork": "forking runs",
  "runs:migrate": "migrating runs",
};

let me = { name: "", groups: [], scopes: [] };

/** Ask the server who the token names; resolves to the principal. */
export async function loadPrincipal() {
  me = await api("/whoami");
  return me;
}

export const principal = () => me;

/** Whether the user may do `scope` (runs:start: of some graph, or of `graph` if given). */
export function may(scope, graph) {
  const held = new Set(me.scopes);
  if (held.has("admin") || held.has(scope)) return true;
  if (scope !== "runs:start") return false;
  if (graph) return held.has(`runs:start:${graph}`);
  return me.scopes.some((s) => s.startsWith("runs:start:"));
}

/** Why the user may not do `scope`, in words. */
export function reason(scope) {
  return `${DOING[scope] || scope} needs ${scope}`;
}

/**
 * Whether the user may answer a gate naming `reviewers` (names and `group:NAME`; none:
 * anyone). The loopback server without sign-in (`local`) is trusted, as the CLI is.
 */
export function reviews(reviewers) {
  if (!reviewers || !reviewers.length || me.source === "local") return true;
  return reviewers.some((r) => r.startsWith("group:") ? me.groups.includes(r.slice(6)) : r === me.name);
}

/** Who may answer a gate naming `reviewers`, in words. */
export function reviewersReason(reviewers) {
  const names = reviewers.filter((r) => !r.startsWith("group:"));
  const groups = reviewers.filter((r) => r.startsWith("group:")).map((r) => r.slice(6));
  const who = [...names, ...(groups.length ? [`members of ${groups.join(" or ")}`] : [])];
  return `only ${who.join(" or ")} may answer this gate`;
}

function refuse(controls, why, attrs) {
  for (const control of controls) {
    control.disabled = true;
    control.title = why;
  }
  return h("span", attrs, why);
}

/**
 * Disable `controls` (buttons, inputs) unless the user may do `scope`; returns the note
 * saying why, to show beside them ("" when they are allowed).
 */
export function guard(scope, controls) {
  if (may(scope)) return "";
  return refuse(controls, reason(scope), { class: "needs-scope", "data-scope": scope });
}

/** As `guard` for gates:answer, and then for the gate's `reviewers`. */
export function guardGate(reviewers, controls) {
  if (!may("gates:answer")) return guard("gates:answer", controls);
  if (reviews(reviewers)) return "";
  return refuse(controls, reviewersReason(reviewers), { class: "needs-scope not-a-reviewer" });
}
