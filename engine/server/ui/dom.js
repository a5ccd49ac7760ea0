// Small DOM helpers. Run data is always set as text (never as markup), so nothing a run
// holds can inject into the page.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(element, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "text") element.textContent = value;
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** An HTML element: h("p", {class: "x", onclick: f}, "text", child…). */
export const h = (tag, attrs, ...children) =>
  build(tag instanceof Node ? tag : document.createElement(tag), attrs, children);

/** Replace an element's children with these (nested lists flattened, empty ones left out). */
export function fill(element, ...children) {
  element.replaceChildren();
  return build(element, {}, children);
}

/** An SVG element. */
export const s = (tag, attrs, ...children) =>
  build(document.createElementNS(SVG_NS, tag), attrs, children);

/** JSON shown in a <pre>, cut when very long. */
export function json(value, limit = 20000) {
  let text = JSON.stringify(value, null, 2);
  if (text === undefined) text = String(value);
  if (text.length > limit) text = `${text.slice(0, limit)}\n… (${text.length - limit} more characters)`;
  return h("pre", { class: "json" }, text);
}

const pad = (n, width = 2) => String(n).padStart(width, "0");

/** 2026-11-24 03:34:05 in local time. */
export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** 03:34:05.123 in local time. */
export function clock(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** "4 s ago", "3 min ago", … */
export function ago(iso, now = Date.now()) {
  const seconds = Math.round((now - new Date(iso).getTime()) / 1000);
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 60) return `${Math.max(seconds, 0)} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

/** A duration in milliseconds, short: 12 ms, 1.4 s, 3 min 2 s. */
export function duration(ms) {
  if (!Number.isFinite(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export const badge = (status) => h("span", { class: `badge st-${status}` }, status);

/** A status line for a failed call, naming what to do when the token is the problem. */
export function problemText(error) {
  if (error.status === 401) return "The server refused the token: enter the right one.";
  const problem = error.problem || {};
  const parts = [error.message];
  for (const item of problem.problems || []) {
    const where = item.field || item.location;
    if (item.message && item.message !== error.message) parts.push(where ? `${where}: ${item.message}` : item.message);
  }
  if (problem.legal_triggers) parts.push(`legal triggers: ${problem.legal_triggers.join(", ")}`);
  return parts.join(" — ");
}

/**
 * What a gate card's buttons share: `show(text, isError)` says it in the card's `status`;
 * `answer(trigger, payload)` disables the card's `buttons`, sends, and on the server's
 * refusal shows it (`describe(error)`) and enables them again.
 */
export function gateAnswers(status, buttons, send, describe) {
  const show = (text, isError) => {
    status.textContent = text;
    status.className = isError ? "message error" : "message";
  };
  const answer = async (trigger, payload) => {
    buttons.forEach((b) => (b.disabled = true));
    show(`Sending ${trigger}…`, false);
    try {
      await send(trigger, payload);
      show(`Answered ${trigger}.`, false);
    } catch (error) {
      show(describe(error), true);
      buttons.forEach((b) => (b.disabled = false));
    }
  };
  return { show, answer };
}
