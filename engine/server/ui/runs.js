// The runs list: status and graph filters, newest updates first, waiting and parked runs
// called out. Refreshed every few seconds while shown.

import { guard, may } from "./access.js";
import { api, ApiError, enc } from "./api.js";
import { ago, badge, fill, h, problemText, when } from "./dom.js";

const STATUSES = ["running", "waiting", "parked", "completed", "failed", "cancelled"];
const PAGE = 100;
const REFRESH_MS = 3000;
const ATTENTION = new Set(["waiting", "parked"]);

export function showRuns(main, params) {
  let runs = [];
  let nextOffset = null;
  let timer = null;
  let closed = false;
  const status = params.get("status") || "";
  let graph = params.get("graph") || "";

  const statusSelect = h("select", { id: "f-status", onchange: () => go({ status: statusSelect.value, graph }) },
    h("option", { value: "" }, "any status"),
    STATUSES.map((st) => h("option", { value: st, selected: st === status }, st)));
  const graphSelect = h("select", { id: "f-graph", onchange: () => {
    graph = graphSelect.value;
    go({ status, graph }, true);
    render();
  } });
  const banner = h("p", { class: "attention-banner", hidden: true });
  const body = h("tbody");
  const more = h("button", { type: "button", hidden: true, onclick: () => load(runs.length, true) }, "Load more runs");
  const message = h("p", { class: "muted", role: "status" }, "Loading runs…");
  const startName = h("input", { id: "start-graph", type: "text", placeholder: "hello", required: true, spellcheck: "false" });
  const startButton = h("button", { type: "submit" }, "Start");
  const startStatus = h("span", { class: "message", role: "status" });
  const startForm = h("form", { class: "start", onsubmit: async (e) => {
    e.preventDefault();
    const name = startName.value.trim();
    if (!may("runs:start", name)) {
      startStatus.textContent = `starting ${name} needs runs:start:${name}`;
      return;
    }
    try {
      const run = await api("/runs", { method: "POST", body: { graph: name } });
      location.hash = `#/runs/${enc(run.run_id)}`;
    } catch (error) {
      startStatus.textContent = problemText(error);
    }
  } },
  h("label", { for: "start-graph" }, "Start a run of the built-in graph"), " ", startName, " ", startButton,
  " ", guard("runs:start", [startButton, startName]), startStatus);

  fill(main, 
    h("h1", {}, "Runs"),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "f-status" }, "Status"), statusSelect,
      h("label", { for: "f-graph" }, "Graph"), graphSelect),
    startForm,
    banner,
    h("div", { class: "table-wrap" },
      h("table", { class: "runs" },
        h("caption", { class: "sr-only" }, "Runs, most recently updated first"),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Run"), h("th", { scope: "col" }, "Graph"),
          h("th", { scope: "col" }, "Status"), h("th", { scope: "col", class: "num wide" }, "Step"),
          h("th", { scope: "col", class: "wide" }, "Started"), h("th", { scope: "col" }, "Updated"))),
        body)),
    message,
    more,
  );

  function go(values, replace = false) {
    const query = new URLSearchParams(Object.entries(values).filter(([, v]) => v));
    const target = `#/${query.toString() ? `?${query}` : ""}`;
    if (replace) history.replaceState(null, "", target);
    else location.hash = target;
  }

  function render() {
    const graphs = [...new Set(runs.map((r) => r.graph).concat(graph ? [graph] : []))].sort();
    fill(graphSelect, h("option", { value: "" }, "any graph"),
      graphs.map((g) => h("option", { value: g, selected: g === graph }, g)));
    const shown = runs.filter((r) => !graph || r.graph === graph);
    const now = Date.now();
    fill(body, ...shown.map((run) => h("tr", { class: ATTENTION.has(run.status) ? "attention" : "" },
      h("td", {}, h("a", { href: `#/runs/${enc(run.run_id)}` }, run.run_id)),
      h("td", {}, run.graph),
      h("td", {}, badge(run.status), ATTENTION.has(run.status) ? h("span", { class: "sr-only" }, " (needs an answer)") : ""),
      h("td", { class: "num wide" }, run.seq),
      h("td", { class: "wide", title: run.created_at }, when(run.created_at)),
      h("td", { title: when(run.updated_at) }, ago(run.updated_at, now)))));
    const waiting = shown.filter((r) => ATTENTION.has(r.status)).length;
    banner.hidden = waiting === 0;
    document.title = waiting ? `(${waiting} waiting) runs · phasegraph` : "runs · phasegraph";
    banner.textContent = waiting === 1 ? "1 run is waiting for an answer." : `${waiting} runs are waiting for an answer.`;
    const none = status ? `No ${status} runs.` : "No runs yet.";
    message.textContent = shown.length ? "" : runs.length ? "No run of this graph among those loaded." : none;
    more.hidden = nextOffset === null;
  }

  async function load(offset, append) {
    try {
      const limit = append ? PAGE : Math.max(PAGE, runs.length);
      const page = await api(`/runs?limit=${limit}&offset=${offset}${status ? `&status=${enc(status)}` : ""}`);
      if (closed) return;
      runs = append ? runs.concat(page.runs) : page.runs;
      nextOffset = page.next_offset;
      render();
    } catch (error) {
      if (closed) return;
      message.textContent = error instanceof ApiError ? problemText(error) : String(error);
    }
  }

  async function tick() {
    await load(0, false);
    if (!closed) timer = setTimeout(tick, REFRESH_MS);
  }
  tick();
  return () => {
    closed = true;
    clearTimeout(timer);
  };
}
