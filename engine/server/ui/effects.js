// Side effects in the viewer: the gate that asks whether an uncertain effect happened,
// the ledger's steps as the timeline words them, and a node's ledger.
//
// A `once` effect commits its intent before it runs and its result after; a step cut
// short between the two leaves an `outcome_unknown` gate (the run's `on_unknown: ask`),
// answered `happened` (with the call's result, or for the action's own effect the
// trigger it returned), `run_again` (same effect id) or `fail` (with a reason).

import { guard } from "./access.js";
import { gateAnswers, h, json } from "./dom.js";

export const OUTCOME_UNKNOWN = "outcome_unknown";

/** A ledger entry's call: "run_command #1", or the action's own effect. */
export const callName = (entry) => (entry.tool ? `${entry.tool} #${entry.index}` : "the action's effect");

const gateEffect = (interruptId) => String(interruptId || "").replace(/:outcome$/, "");

/**
 * The timeline's words for a step of the effect ledger (its intent, its result, the
 * gate asking about it and the answer), or null for any other step.
 */
export function ledgerWords(record) {
  const entry = record.ledger;
  if (entry && record.kind === "intent") return `intent · ${callName(entry)} · id ${entry.id}`;
  if (entry && record.kind === "effect") return `result · ${callName(entry)}`;
  if (record.kind === "cancel") return null; // it closes every gate: a cancel, named as such
  for (const event of record.events || []) {
    if (event.kind === `${OUTCOME_UNKNOWN}_request`) {
      return `outcome unknown · ${callName(event.payload || {})} · asked`;
    }
    if (event.kind === `${OUTCOME_UNKNOWN}_reply`) {
      const answer = event.cancelled ? "closed unanswered" : `answered ${event.trigger}`;
      return `${answer} · id ${gateEffect(event.id)}`;
    }
  }
  return null;
}

/**
 * The ledger of `node`'s step in flight, rebuilt from `records` (ascending seq): a step
 * that moves the node carries its whole ledger (empty once a step commits); an intent or
 * effect step adds or replaces one entry.
 */
export function ledgerOf(records, node) {
  // From the steps loaded: a step in flight that began before them shows what they hold.
  let ledger = [];
  for (const record of records) {
    const moved = record.nodes && record.nodes[node];
    if (moved) ledger = (moved.ledger || []).slice();
    else if (record.ledger && record.node === node) {
      ledger = ledger.filter((e) => e.id !== record.ledger.id).concat([record.ledger]);
    }
  }
  return ledger;
}

function outcomeText(entry) {
  if (entry.result) return "result committed";
  return entry.on_unknown === "retry" ? "no result: runs again (same id)" : "intent only: outcome unknown until its result is committed";
}

/** The node panel's view of its ledger: one row per call of the step in flight. */
export function ledgerTable(ledger) {
  if (!ledger.length) return "";
  return [
    h("h3", {}, "Effects of the step in flight"),
    h("div", { class: "table-wrap" }, h("table", { class: "ledger" },
      h("thead", {}, h("tr", {}, ["Call", "Effect id", "Kind", "On unknown", "Outcome"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ledger.map((entry) => h("tr", { "data-effect": entry.id, class: entry.result ? "" : "uncertain" },
        h("td", { class: "mono" }, callName(entry)), h("td", { class: "mono" }, entry.id),
        h("td", {}, entry.effect), h("td", {}, entry.on_unknown),
        h("td", {}, outcomeText(entry), entry.result ? h("details", {}, h("summary", {}, "result"), json(entry.result)) : "")))))),
  ];
}

/** The triggers the node's current state takes (offered for an action's own effect). */
export function triggersAt(shape, node, path) {
  let machineName = shape && shape.nodes[node] && shape.nodes[node].machine;
  let machine = null;
  let here = null;
  for (const name of path || []) {
    machine = shape.machines[machineName];
    if (!machine) return [];
    here = name;
    const nested = machine.states.find((st) => st.name === name);
    if (!nested || !nested.machine) break;
    machineName = nested.machine;
  }
  if (!machine) return [];
  const legal = machine.transitions.filter((t) => t.source.includes(here) || t.source.includes("*"));
  return [...new Set(legal.map((t) => t.trigger))];
}

/**
 * The card of an `outcome_unknown` gate: its question, the call, and the three answers,
 * each labelled. `send(trigger, payload)` answers the gate and resolves when the server
 * took the answer (it rejects with the server's refusal, which the card shows).
 */
export function effectGateCard(interrupt, n, { triggers, send, describe }) {
  const p = interrupt.payload || {};
  const ownEffect = !p.tool;
  const status = h("p", { class: "message", role: "status" });
  const buttons = [];
  const { show, answer } = gateAnswers(status, buttons, send, describe);
  const button = (trigger, label, onclick) => {
    const b = h("button", { type: "button", class: "trigger", "data-answer": trigger, onclick }, label);
    buttons.push(b);
    return b;
  };

  // "It happened": the call's result (a JSON object), or the trigger the action returned.
  let happenedField;
  let happened;
  if (ownEffect) {
    const listId = `happened-triggers-${n}`;
    const input = h("input", { id: `happened-${n}`, type: "text", list: listId, placeholder: "a trigger name", spellcheck: "false" });
    happened = () => {
      const trigger = input.value.trim();
      if (!trigger) return show("Name the trigger the action returned: nothing was sent.", true);
      return answer("happened", { trigger });
    };
    happenedField = [h("label", { for: `happened-${n}` }, "The trigger it returned"), input,
      h("datalist", { id: listId }, triggers.map((t) => h("option", { value: t })))];
  } else {
    const area = h("textarea", { id: `happened-${n}`, rows: 3, spellcheck: "false", placeholder: '{"exit": 0, "stdout": "…"}' });
    happened = () => {
      let result = {};
      try {
        if (area.value.trim()) result = JSON.parse(area.value);
      } catch (error) {
        return show(`The result is not JSON (${error.message}): nothing was sent.`, true);
      }
      return answer("happened", { result });
    };
    happenedField = [h("label", { for: `happened-${n}` }, "Its result (a JSON object; empty sends {})"), area];
  }
  const reason = h("input", { id: `fail-reason-${n}`, type: "text", placeholder: "optional", maxlength: 1000 });
  const offered = new Set(interrupt.answers || []);
  const choices = [];
  if (offered.has("happened")) {
    choices.push(h("div", { class: "answer" }, h("h3", {}, "It happened"),
      h("p", { class: "muted small" }, ownEffect
        ? "The action's effect took place: the run goes on as if the action had returned this trigger."
        : "The call's effect took place: this result is committed as the call's, and the call is not run again."),
      happenedField, button("happened", "It happened", happened)));
  }
  if (offered.has("run_again")) {
    choices.push(h("div", { class: "answer" }, h("h3", {}, "Run it again"),
      h("p", { class: "muted small" }, "It did not happen: run it again, with the same effect id."),
      button("run_again", "Run it again", () => answer("run_again", {}))));
  }
  if (offered.has("fail")) {
    choices.push(h("div", { class: "answer" }, h("h3", {}, "Fail"),
      h("p", { class: "muted small" }, "Fail the node, saying why."),
      h("label", { for: `fail-reason-${n}` }, "Reason"), reason,
      button("fail", "Fail", () => answer("fail", reason.value.trim() ? { reason: reason.value.trim() } : {}))));
  }
  return h("article", { class: "gate effect-gate", "data-kind": OUTCOME_UNKNOWN, "aria-labelledby": `gate-h-${n}` },
    h("h2", { id: `gate-h-${n}` }, "Outcome unknown at node ", h("strong", {}, interrupt.node)),
    h("p", { class: "question" }, p.question || "Did this effect happen?"),
    h("dl", { class: "facts" },
      h("dt", {}, "call"), h("dd", { class: "mono" }, ownEffect ? "the action's own effect" : callName(p)),
      h("dt", {}, "effect id"), h("dd", { class: "mono" }, p.effect_id || "—"),
      h("dt", {}, "kind"), h("dd", {}, p.effect || "—"),
      h("dt", {}, "gate id"), h("dd", { class: "mono" }, interrupt.id)),
    ownEffect ? "" : [h("h3", {}, "Arguments"), json(p.arguments || {})],
    h("div", { class: "answers", role: "group", "aria-label": "Answer: did it happen?" }, choices),
    guard("gates:answer", buttons),
    status);
}
