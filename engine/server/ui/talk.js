// A node's conversations with its model, rebuilt from the steps shown: an `llm:` step
// writes the whole message list under a data key (its first step, a compression) or
// appends its new messages (`record.appended`); tool steps append the tools' results.
// Everything from a run is set as text: nothing it holds is read as markup.

import { spendText } from "./budget.js";
import { duration, h } from "./dom.js";

const SUMMARY_PREFIX = "Summary of the earlier conversation"; // the llm action's summary head
const MARKED_EVENTS = new Set(["phase_violation", "loop_detected"]);

const isMessage = (item) => item !== null && typeof item === "object" && !Array.isArray(item) && typeof item.role === "string";
const isMessages = (value) => Array.isArray(value) && value.length > 0 && value.every(isMessage);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/**
 * The conversations of `node` in `records` (ascending seq): data key → {entries}.
 * An entry is {type: "system", seq, text} (the system message a turn sent, where it
 * first did or changed), {type: "message", seq, message, turn?, calls?, prompted?} (an assistant message's
 * calls each get their result when a later tool message answers it), {type: "compression",
 * seq, details, summary} or {type: "event", seq, event} (a refused call, a loop warning).
 */
export function conversationsOf(records, node) {
  const talks = new Map();
  const talk = (key) => {
    if (!talks.has(key)) talks.set(key, { entries: [], messages: [], open: new Map(), system: null });
    return talks.get(key);
  };
  for (const record of records) {
    if (record.node !== node) continue;
    const output = (record.result && record.result.output) || {};
    const compressed = (record.events || []).find((e) => e.kind === "conversation_compressed") || output.compression;
    const touched = new Set();
    for (const [key, value] of Object.entries(record.data || {})) {
      if (!isMessages(value)) continue;
      const t = talk(key);
      touched.add(key);
      const prefix = t.messages.length <= value.length && t.messages.every((m, i) => same(m, value[i]));
      if (prefix) {
        announce(t, record, output);
        value.slice(t.messages.length).forEach((m) => add(t, record, m, output));
        settle(t, record, output);
      } else {
        // Replaced, not extended: a compression (or a list rewritten by an action).
        const summary = value.find((m) => String(m.content || "").startsWith(SUMMARY_PREFIX));
        t.entries.push({ type: "compression", seq: record.seq, details: compressed || {}, summary, kept: value.length - (summary ? 1 : 0) });
      }
      t.messages = value.slice();
    }
    for (const [key, items] of Object.entries(record.appended || {})) {
      if (!items.every(isMessage)) continue;
      const t = talk(key);
      touched.add(key);
      announce(t, record, output);
      items.forEach((m) => add(t, record, m, output));
      settle(t, record, output);
      t.messages.push(...items);
    }
    for (const event of record.events || []) {
      if (!MARKED_EVENTS.has(event.kind)) continue;
      const keys = touched.size ? [...touched] : [...talks.keys()].slice(-1);
      for (const key of keys) talk(key).entries.push({ type: "event", seq: record.seq, event });
    }
  }
  return talks;
}

// A turn's record holds the system message it sent (never in the conversation itself):
// shown where it was first sent, and again wherever it changed.
function announce(t, record, output) {
  if (typeof output.system !== "string" || !output.finish_reason || output.system === t.system) return;
  t.system = output.system;
  t.entries.push({ type: "system", seq: record.seq, text: output.system });
}

// A turn whose earlier answers did not comply with its binding (tool_choice,
// parallel_tool_calls, response_format) holds them too: the turn's facts go with the
// answer kept, and each refused one says why it was asked again.
function settle(t, record, output) {
  const answers = t.entries.filter((e) => e.seq === record.seq && e.type === "message" && e.message.role === "assistant");
  const reasons = Array.isArray(output.refused_answers) ? output.refused_answers : [];
  answers.slice(0, -1).forEach((entry, i) => {
    delete entry.turn;
    entry.refused = reasons[i] || "asked again";
  });
}

function add(t, record, message, output) {
  if (message.role === "tool") {
    const call = t.open.get(message.tool_call_id);
    if (call) {
      call.result = message;
      call.resultSeq = record.seq;
      t.open.delete(message.tool_call_id);
      return;
    }
  }
  const entry = { type: "message", seq: record.seq, message };
  // The user message the binding's prompt template rendered to on this turn.
  if (message.role === "user" && typeof output.prompt === "string" && message.content === output.prompt) entry.prompted = true;
  if (message.role === "assistant") {
    if (output.usage || output.model || output.finish_reason) {
      // What the turn spent of the run's budget (tokens, money in millionths).
      entry.turn = { ...output, spend: (record.result && record.result.spend) || null };
    }
    // Call ids may repeat from one turn to the next: a result answers the latest call.
    t.open.clear();
    entry.calls = (message.tool_calls || []).map((c) => {
      const call = { id: c.id, name: (c.function && c.function.name) || "?", arguments: (c.function && c.function.arguments) || "" };
      t.open.set(c.id, call);
      return call;
    });
  }
  t.entries.push(entry);
}

function parsed(text) {
  if (typeof text !== "string") return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const pretty = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

function turnFacts(turn) {
  const usage = turn.usage || {};
  const parts = [];
  if (turn.model) parts.push(`model ${turn.model}`);
  if (turn.finish_reason) parts.push(`finish ${turn.finish_reason}`);
  if (usage.prompt_tokens !== undefined || usage.completion_tokens !== undefined) {
    parts.push(`${usage.prompt_tokens ?? "?"} prompt + ${usage.completion_tokens ?? "?"} completion tokens`);
  } else if (usage.total_tokens !== undefined) parts.push(`${usage.total_tokens} tokens`);
  const spent = spendText(turn.spend);
  if (spent) parts.push(`spent ${spent}`);
  if (turn.tool_choice) parts.push(`tool_choice ${turn.tool_choice}`);
  if (turn.parallel_tool_calls === false) parts.push("one call an answer");
  if (turn.response_format) parts.push(`schema ${turn.response_format}`);
  const refused = (turn.refused_answers || []).length;
  if (refused) parts.push(`${refused} answer${refused > 1 ? "s" : ""} asked again`);
  if (Number.isFinite(turn.duration_ms)) parts.push(duration(turn.duration_ms));
  return parts.join(" · ");
}

// A call of the step in flight has no tool message yet; its ledger entry (if any) says
// whether its result is committed already or only its intent.
function pending(entry) {
  if (!entry) return h("p", { class: "muted small" }, "no result yet");
  if (!entry.result) return h("p", { class: "muted small pending-call" }, `intent committed (effect ${entry.id}): no result yet`);
  return h("details", { class: "tool-result committed" },
    h("summary", {}, `result committed (effect ${entry.id}); the step is not committed yet`), h("pre", {}, pretty(entry.result)));
}

function callBox(call, entry) {
  const result = call.result ? parsed(call.result.content) : undefined;
  const refused = result && typeof result === "object" && result.error === "phase_violation";
  const warned = result && typeof result === "object" && result.loop_warning;
  const args = parsed(call.arguments);
  return h("div", { class: `tool-call${refused ? " refused" : ""}`, "data-tool": call.name },
    h("div", { class: "tool-head" }, h("span", { class: "tool-name mono" }, call.name),
      refused ? h("span", { class: "flag refused-flag" }, "refused") : "",
      warned ? h("span", { class: "flag loop-flag" }, "loop warning") : ""),
    h("pre", { class: "tool-args" }, pretty(args)),
    call.result
      ? h("details", { class: "tool-result", open: refused || undefined },
        h("summary", {}, `result (step ${call.resultSeq})`), h("pre", {}, pretty(result)))
      : pending(entry));
}

function messageBox(entry, ledger) {
  const m = entry.message;
  const text = typeof m.content === "string" ? m.content : m.content == null ? "" : pretty(m.content);
  return h("div", { class: `msg role-${m.role}${entry.prompted ? " prompted" : ""}${entry.refused ? " refused-answer" : ""}`, "data-seq": entry.seq },
    h("div", { class: "msg-head" }, h("strong", {}, m.role), h("span", { class: "muted small" }, ` step ${entry.seq}`),
      entry.prompted ? h("span", { class: "muted small" }, " · the prompt template, rendered") : "",
      entry.refused ? [" ", h("span", { class: "flag refused-flag", title: entry.refused }, "asked again")] : "",
      entry.turn ? h("span", { class: "muted small turn-facts" }, ` · ${turnFacts(entry.turn)}`) : ""),
    text ? h("div", { class: "msg-text" }, text) : "",
    m.refusal ? h("div", { class: "msg-text refusal" }, `refused: ${m.refusal}`) : "",
    (entry.calls || []).map((call, index) => callBox(call, ledger.find((e) => e.index === index && e.tool === call.name))));
}

function systemBox(entry) {
  return h("div", { class: "msg role-system", "data-seq": entry.seq },
    h("div", { class: "msg-head" }, h("strong", {}, "system"), h("span", { class: "muted small" }, ` sent from step ${entry.seq}`)),
    h("div", { class: "msg-text" }, entry.text));
}

function compressionBox(entry) {
  const d = entry.details;
  const what = d.message || (d.summarized !== undefined ? `summarized ${d.summarized} messages` : "the conversation was replaced");
  const sizes = d.tokens_before !== undefined ? ` (about ${d.tokens_before} → ${d.tokens_after} tokens; ${d.kept ?? entry.kept} recent kept)` : "";
  return h("div", { class: "msg compression", "data-seq": entry.seq },
    h("div", { class: "msg-head" }, h("strong", {}, "compressed"), h("span", { class: "muted small" }, ` step ${entry.seq}`)),
    h("p", {}, what, sizes),
    entry.summary ? h("details", {}, h("summary", {}, "summary"), h("div", { class: "msg-text" }, String(entry.summary.content))) : "");
}

function eventBox(entry) {
  const e = entry.event;
  const label = e.kind === "phase_violation" ? "refused call" : "loop warning";
  return h("div", { class: `marker ${e.kind}`, "data-seq": entry.seq, role: "note" },
    h("strong", {}, label), ` at step ${entry.seq}: `, e.message || JSON.stringify(e));
}

/**
 * The conversation panel's content: each conversation, then the text streaming now.
 * `ledger` is the node's step in flight's (see effects.js): its entries belong to the calls
 * of the latest assistant message that made some.
 */
export function renderConversations(talks, liveText, ledger = []) {
  const parts = [];
  for (const [key, t] of talks) {
    const calling = t.entries.findLast((e) => e.type === "message" && e.calls && e.calls.length);
    parts.push(h("h3", {}, "Conversation ", h("span", { class: "mono" }, key)),
      h("div", { class: "talk", "data-key": key }, t.entries.map((entry) =>
        entry.type === "message" ? messageBox(entry, entry === calling ? ledger : [])
          : entry.type === "system" ? systemBox(entry)
            : entry.type === "compression" ? compressionBox(entry) : eventBox(entry))));
  }
  parts.push(liveText);
  return parts;
}
