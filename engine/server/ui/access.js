// Who the viewer's user is (GET /whoami) and what their scopes allow. A control the
// scopes do not allow is shown disabled with the reason next to it, so a missing button
// never looks like a bug ("answering gates needs gates:answer").

import { api } from "./api.js";
import { h } from "./dom.js";

const DOING = {
  "runs:read": "reading runs",
  "runs:start": "starting runs",
  "gates:answer": "answering gates",
  "runs:resume": "resuming runs",
  "runs:cancel": "cancelling runs",
  "runs:fork": "forking runs",
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
 * Disable `controls` (buttons, inputs) unless the user may do `scope`; returns the note
 * saying why, to show beside them ("" when they are allowed).
 */
export function guard(scope, controls) {
  if (may(scope)) return "";
  for (const control of controls) {
    control.disabled = true;
    control.title = reason(scope);
  }
  return h("span", { class: "needs-scope", "data-scope": scope }, reason(scope));
}
