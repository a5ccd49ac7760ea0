// The run's budget for model calls: the line in the run's header, and the card of its
// budget gate (kind "budget"), which asks a person for more tokens or money, or to stop.
import { guard } from "./access.js";
import { gateAnswers, h } from "./dom.js";

export const BUDGET_GATE = "budget";

const shown = (value) => String(+(+value).toFixed(6));

/** Spend as a person reads it: tokens, and money (counted in millionths) in currency units. */
export function spendText(spend) {
  if (!spend) return "";
  const parts = [];
  if (Number.isFinite(spend.tokens)) parts.push(`${spend.tokens} tokens`);
  if (Number.isFinite(spend.money) && spend.money) parts.push(`${shown(spend.money / 1e6)} money`);
  return parts.join(" · ");
}

/** The run's budget in its header: what was spent, and what is left of each limit. */
export function budgetLine(budget) {
  if (!budget) return "";
  const parts = [];
  for (const kind of ["tokens", "money"]) {
    const spent = budget.spent[kind];
    const limit = budget.limit[kind];
    if (limit === null && !spent) continue;
    let said = `${shown(spent)} ${kind} spent`;
    if (limit !== null) said += `, ${shown(budget.left[kind])} left of ${limit}`;
    if (budget.reserved[kind]) said += ` (${shown(budget.reserved[kind])} reserved)`;
    parts.push(said);
  }
  return parts.length ? [h("span", { class: "budget" }, `budget: ${parts.join("; ")}`), " · "] : "";
}

/** The budget gate: add tokens and/or money to the run's limits (more), or stop. */
export function budgetGateCard(interrupt, n, { send, describe }) {
  const p = interrupt.payload || {};
  const status = h("p", { class: "message", role: "status" });
  const buttons = [];
  const tokens = h("input", { id: `more-tokens-${n}`, type: "number", min: "0", step: "1", placeholder: "0" });
  const money = h("input", { id: `more-money-${n}`, type: "number", min: "0", step: "any", placeholder: "0" });
  const { show, answer } = gateAnswers(status, buttons, send, describe);
  const more = () => {
    const payload = {};
    if (tokens.value) payload.tokens = Number(tokens.value);
    if (money.value) payload.money = Number(money.value);
    if (!payload.tokens && !payload.money) return show("Say how many tokens or how much money to add: nothing was sent.", true);
    return answer("more", payload);
  };
  const button = (trigger, label, onclick) => {
    const b = h("button", { type: "button", class: "trigger", "data-answer": trigger, onclick }, label);
    buttons.push(b);
    return b;
  };
  const amounts = (values) => Object.entries(values || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "—";
  return h("article", { class: "gate budget-gate", "data-kind": BUDGET_GATE, "aria-labelledby": `gate-h-${n}` },
    h("h2", { id: `gate-h-${n}` }, "Out of budget at node ", h("strong", {}, interrupt.node)),
    h("p", { class: "question" }, p.question || "The run's budget cannot reserve the next model call."),
    h("dl", { class: "facts" },
      h("dt", {}, "waiting"), h("dd", { class: "mono" }, (p.nodes || [interrupt.node]).join(", ")),
      h("dt", {}, "asked"), h("dd", { class: "mono" }, amounts(p.asked)),
      h("dt", {}, "left"), h("dd", { class: "mono" }, amounts(p.left)),
      h("dt", {}, "limit"), h("dd", { class: "mono" }, amounts(p.limit)),
      h("dt", {}, "gate id"), h("dd", { class: "mono" }, interrupt.id)),
    h("div", { class: "answers", role: "group", "aria-label": "Answer: more budget, or stop" },
      h("div", { class: "answer" }, h("h3", {}, "More"),
        h("p", { class: "muted small" }, "Add to the run's limits: every waiting call runs again."),
        h("label", { for: `more-tokens-${n}` }, "Tokens to add"), tokens,
        h("label", { for: `more-money-${n}` }, "Money to add"), money,
        button("more", "Add", more)),
      h("div", { class: "answer" }, h("h3", {}, "Stop"),
        h("p", { class: "muted small" }, "Fail every waiting node, as its action would have failed."),
        button("stop", "Stop", () => answer("stop", {})))),
    guard("gates:answer", buttons),
    status);
}
