// One run: header and actions, open gates, the DAG live, a node's machine, the step
// timeline, a step's detail (result, data delta, snapshot, fork), the error log and replay.
// The event stream only says "something was committed": each batch triggers one refresh
// of the run view and of the history after the last step shown. A step that made a
// plan's children (`expand`) also fetches the graph's shape again, and draws it anew.

import { guard, guardGate } from "./access.js";
import { api, ApiError, enc, follow } from "./api.js";
import { badge, clock, duration, fill, h, json, problemText, when } from "./dom.js";
import { effectGateCard, ledgerOf, ledgerTable, ledgerWords, OUTCOME_UNKNOWN, triggersAt } from "./effects.js";
import { drawDag, drawMachine } from "./layout.js";
import { childFacts, planKey, planVersionsOf, renderPlanVersions, resultOf } from "./plans.js";
import { BUDGET_GATE, budgetGateCard, budgetLine, spendText } from "./budget.js";
import { conversationsOf, renderConversations } from "./talk.js";

const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const FIRST_PAGE = 300; // steps shown at first; older ones on request
const PAGE = 1000; // the history route's largest page
const LAST_OF_STEP = 999999999; // the largest event index: "after every event of that step"

const path = (states) => (states && states.length ? states.join(" / ") : "—");

export function showRun(main, runId, query = new URLSearchParams()) {
  const base = `/runs/${enc(runId)}`;
  // A link may name a node and a step to open on (`#/runs/ID?node=…&seq=…`).
  const asked = { node: query.get("node"), seq: /^\d+$/.test(query.get("seq") || "") ? Number(query.get("seq")) : null };
  const state = {
    run: null,
    shape: null,
    records: [], // ascending seq, contiguous from `first`
    first: 0,
    errors: [],
    pick: { node: null, seq: null },
    gateKey: null,
    streamed: {}, // node → the text its model is streaming now (live, not committed)
    attempts: {}, // node → the lease token of the driver whose streamed text is shown
  };
  let stream = null;
  let closed = false;
  let busy = false;
  let again = false;

  const title = h("h1", {}, "Run ", h("span", { class: "mono" }, runId));
  const meta = h("p", { class: "meta" });
  const live = h("span", { class: "live", role: "status" });
  const actions = h("div", { class: "actions" });
  const message = h("p", { class: "message", role: "status", "aria-live": "polite" });
  const gates = h("section", { class: "gates", "aria-label": "Open gates" });
  const dagNote = h("p", { class: "muted" });
  const dagBox = h("div", { class: "dag-box" });
  const rows = h("tbody");
  const stepsBox = h("div", { class: "table-wrap" });
  const earlier = h("button", { type: "button", class: "link", hidden: true, onclick: loadEarlier }, "Show earlier steps");
  // A long run's steps interleave its nodes: one node's steps can be listed alone.
  const stepNode = h("select", { id: "step-node", onchange: () => filterRows() }, h("option", { value: "" }, "all nodes"));
  const nodePanel = h("section", { class: "panel", "aria-label": "Node" });
  const talkPanel = h("section", { class: "panel conversation", "aria-label": "Conversation", hidden: true });
  const liveText = h("div", { class: "live-text", "aria-live": "polite", hidden: true });
  const stepPanel = h("section", { class: "panel", "aria-label": "Step" },
    h("h2", {}, "Step"), h("p", { class: "muted" }, "Pick a step to see its action result, the data it changed and the run's snapshot at that step, and to fork a new run from there."));
  const errors = h("div");
  const replayOut = h("div", { class: "replay-out" });
  let dag = null;

  fill(main, 
    h("p", {}, h("a", { href: "#/" }, "← All runs")),
    h("header", { class: "run-head" }, title, meta, live, actions),
    message,
    gates,
    h("section", { class: "panel", "aria-labelledby": "dag-h" }, h("h2", { id: "dag-h" }, "Graph"), dagNote, dagBox),
    nodePanel,
    talkPanel,
    h("div", { class: "columns" },
      h("section", { class: "panel timeline", "aria-labelledby": "steps-h" },
        h("h2", { id: "steps-h" }, "Steps"),
        h("div", { class: "step-filter" }, h("label", { for: "step-node" }, "Node"), stepNode),
        earlier,
        h(stepsBox, {}, h("table", { class: "steps" },
          h("thead", {}, h("tr", {},
            h("th", { scope: "col", class: "num" }, "Seq"), h("th", { scope: "col" }, "Time"),
            h("th", { scope: "col" }, "Node"), h("th", { scope: "col" }, "from → trigger → to"),
            h("th", { scope: "col", class: "num" }, "Took"))),
          rows))),
      stepPanel),
    h("section", { class: "panel", "aria-labelledby": "errors-h" }, h("h2", { id: "errors-h" }, "Error log"), errors),
    h("section", { class: "panel", "aria-labelledby": "replay-h" }, h("h2", { id: "replay-h" }, "Replay"),
      h("p", { class: "muted" }, "Re-drive the recorded steps through the machines (no action runs) and report the first step that comes out differently."),
      h("button", { type: "button", onclick: replay }, "Replay this run"), replayOut),
  );

  const say = (text, isError = false) => {
    message.textContent = text;
    message.className = isError ? "message error" : "message";
  };
  const fail = (error) => say(error instanceof ApiError ? problemText(error) : String(error), true);

  // ------------------------------------------------------------------ loading

  async function historyFrom(start, stop) {
    const records = [];
    let next = start;
    while (next !== null && (stop === undefined || next < stop)) {
      const limit = stop === undefined ? PAGE : Math.min(PAGE, stop - next);
      const page = await api(`${base}/history?start=${next}&limit=${limit}`);
      records.push(...page.records);
      next = page.next_start;
    }
    return records;
  }

  async function start() {
    try {
      const run = await api(base);
      const { shape, error: shapeError } = await loadShape();
      state.first = Math.max(0, Math.min(run.seq - FIRST_PAGE + 1, asked.seq ?? Infinity));
      state.records = await historyFrom(state.first);
      state.errors = (await api(`${base}/errors`)).errors;
      if (closed) return;
      state.run = run;
      state.shape = shape || flatShape(run);
      noteShape(shape, shapeError);
      state.pick.node = asked.node && state.shape.nodes[asked.node] ? asked.node : defaultNode(run, state.shape, state.records);
      drawShape();
      renderAll();
      if (asked.seq !== null && state.records.some((r) => r.seq === asked.seq)) pickStep(asked.seq);
      if (!TERMINAL.has(run.status)) startStream();
      else showLive("ended");
    } catch (error) {
      if (!closed) {
        fill(main, h("p", {}, h("a", { href: "#/" }, "← All runs")), h("h1", {}, `Run ${runId}`),
          h("p", { class: "error", role: "alert" }, problemText(error)));
      }
    }
  }

  async function loadShape() {
    try {
      return { shape: await api(`${base}/graph`), error: null };
    } catch (error) {
      return { shape: null, error };
    }
  }

  function noteShape(shape, error) {
    dagNote.textContent = error
      ? `The graph's drawing is not available (${problemText(error)}); nodes are shown without their edges.`
      : "";
  }

  // (Re)draw the DAG from state.shape, keeping the node picked, the one the keyboard is
  // on and the step filter's choice: a plan's new children appear without a reload.
  function drawShape() {
    const active = document.activeElement;
    const focused = active && dagBox.contains(active) && active.dataset ? active.dataset.node : null;
    const only = stepNode.value;
    const ids = state.shape.layers.flat();
    fill(stepNode, h("option", { value: "" }, "all nodes"), ids.map((id) => h("option", { value: id }, id)));
    stepNode.value = ids.includes(only) ? only : "";
    dag = drawDag(state.shape, nodeView, pickNode);
    fill(dagBox, dag.svg);
    dag.select(state.pick.node);
    const same = focused && [...dagBox.querySelectorAll("g.node")].find((g) => g.dataset.node === focused);
    if (same) same.focus();
  }

  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const run = await api(base);
      const last = state.records.length ? state.records[state.records.length - 1].seq : state.first - 1;
      const added = await historyFrom(last + 1);
      if (run.error_count !== state.errors.length) state.errors = (await api(`${base}/errors`)).errors;
      // A plan made children (or a new version of them): the graph grew.
      const planned = added.some((record) => record.kind === "expand");
      const reshaped = planned ? await loadShape() : null;
      if (closed) return;
      state.run = run;
      state.records.push(...added);
      if (reshaped && reshaped.shape) {
        state.shape = reshaped.shape;
        noteShape(reshaped.shape, null);
        drawShape();
      } else if (reshaped) noteShape(null, reshaped.error);
      renderAll(added);
    } catch (error) {
      if (!closed) fail(error);
    } finally {
      busy = false;
      if (again && !closed) {
        again = false;
        refresh();
      }
    }
  }

  async function loadEarlier() {
    const stop = state.first;
    const from = Math.max(0, stop - FIRST_PAGE);
    try {
      const older = await historyFrom(from, stop);
      state.records.unshift(...older);
      state.first = from;
      renderTimeline();
    } catch (error) {
      fail(error);
    }
  }

  // ---------------------------------------------------------------- rendering

  function nodeView(id) {
    return (state.run && state.run.nodes[id]) || { status: "pending", state: "" };
  }

  function renderAll(added) {
    renderHead();
    renderGates();
    dag.update(nodeView);
    dag.select(state.pick.node);
    if (added === undefined) renderTimeline();
    else appendRows(added);
    renderErrors();
    renderNode(false);
    renderTalk();
  }

  function renderHead() {
    const run = state.run;
    fill(title, "Run ", h("span", { class: "mono" }, run.run_id), " ", badge(run.status));
    document.title = `${run.status} · ${run.run_id} · phasegraph`;
    fill(meta,
      h("span", {}, "graph ", h("strong", {}, run.graph)), " · ",
      h("span", { class: "version", title: `the version of ${run.graph} this run follows: its stored definition (phasegraph migrate moves it to another)` },
        "version ", h("span", { class: "mono" }, run.graph_digest.slice(0, 12))), " · ",
      h("span", {}, `step ${run.seq}`), " · ",
      h("span", {}, run.summary), " · ",
      budgetLine(run.budget),
      h("span", {}, `started ${when(run.created_at)}`), " · ",
      h("span", {}, `updated ${when(run.updated_at)}`),
      forkedFrom(),
    );
    if (TERMINAL.has(run.status)) showLive("ended");
    const buttons = []; // [scope it needs, button]
    if (run.status === "running" && !run.driving) {
      buttons.push(["runs:resume", h("button", { type: "button", onclick: () => act("resume", {}, "Resumed: the server drives the run.") }, "Resume")]);
    }
    if (!TERMINAL.has(run.status)) buttons.push(["runs:cancel", h("button", { type: "button", class: "danger", onclick: askCancel }, "Cancel run…")]);
    if (state.records.length) {
      buttons.push(["runs:fork", h("button", { type: "button", onclick: () => pickStep(state.records[state.records.length - 1].seq, true) }, "Fork…")]);
    }
    const key = buttons.map(([, b]) => b.textContent).join("|");
    if (actions.dataset.key !== key) {
      fill(actions, buttons.map(([scope, b]) => [b, guard(scope, [b])]));
      actions.dataset.key = key;
    }
  }

  function forkedFrom() {
    const origin = state.first === 0 && state.records.length ? state.records[0].result : {};
    if (!origin.forked_from) return "";
    return [" · forked from ", h("a", { href: `#/runs/${enc(origin.forked_from)}` }, origin.forked_from), ` at step ${origin.at}`];
  }

  function showLive(what, error) {
    const text = {
      live: "● live",
      reconnecting: "reconnecting…",
      ended: "finished",
      stopped: `not following (${error ? problemText(error) : "stopped"})`,
    }[what];
    live.textContent = text || what;
    live.className = `live is-${what}`;
  }

  async function act(route, body, done) {
    try {
      await api(`${base}/${route}`, { method: "POST", body });
      say(done);
      await refresh();
      restartStream();
    } catch (error) {
      fail(error);
    }
  }

  function startStream() {
    // Follow from the last step shown: the stream sends only what comes after it.
    const last = state.records.length ? state.records[state.records.length - 1].seq : state.run.seq;
    stream = follow(runId, `${last}-${LAST_OF_STEP}`, {
      events: (batch) => {
        // A committed step of a node ends the text its model was streaming.
        for (const event of batch) {
          if (!event.node) continue;
          delete state.streamed[event.node];
          delete state.attempts[event.node];
        }
        refresh();
      },
      live: (event) => {
        if (!event.node) return;
        if (event.kind === "stream_gap") {
          // Text the server no longer keeps: say so rather than show a part as the whole.
          state.streamed[event.node] = "[…] ";
        } else {
          const text = event.fields && event.fields.text;
          if (event.kind !== "llm_delta" || typeof text !== "string") return;
          // "SEQ+TOKEN.K": a new driver (a restart) asks the model again from the start.
          const attempt = event.id.split("+")[1].split(".")[0];
          if (state.attempts[event.node] !== attempt) {
            if (state.attempts[event.node] !== undefined) state.streamed[event.node] = "";
            state.attempts[event.node] = attempt;
          }
          state.streamed[event.node] = (state.streamed[event.node] || "") + text;
        }
        if (event.node === state.pick.node) showStreamed();
      },
      state: (what, error) => {
        showLive(what, error);
        if (what === "ended" || what === "stopped") stream = null;
      },
      ended: async () => {
        // Ask the server itself: a refresh already under way may hold an older view.
        const run = await api(base);
        refresh();
        return !TERMINAL.has(run.status);
      },
    });
  }

  function restartStream() {
    // A resumed or answered run may have been followed to its end already: follow again.
    if (!stream && !closed && !TERMINAL.has(state.run.status)) startStream();
  }

  function askCancel() {
    const reason = h("input", { id: "cancel-reason", type: "text", placeholder: "why (optional)", maxlength: 1000 });
    const box = h("form", { class: "inline-form", onsubmit: async (e) => {
      e.preventDefault();
      await act("cancel", reason.value.trim() ? { reason: reason.value.trim() } : {}, "The run was cancelled.");
      box.remove();
    } },
    h("label", { for: "cancel-reason" }, "Reason"), " ", reason, " ",
    h("button", { type: "submit", class: "danger" }, "Cancel the run"), " ",
    h("button", { type: "button", onclick: () => box.remove() }, "Keep it running"));
    actions.after(box);
    reason.focus();
  }

  // --------------------------------------------------------------------- gates

  function renderGates() {
    const open = state.run.interrupts;
    const key = open.map((i) => i.id).join("|");
    if (key === state.gateKey) return; // keep what the user is typing
    state.gateKey = key;
    fill(gates, ...open.map((interrupt, n) => gateCard(interrupt, n)));
  }

  async function sendReply(interrupt, trigger, payload) {
    // The gate's step binds the answer to the question shown: one asked again since is not answered by it.
    const body = { interrupt_id: interrupt.id, trigger, payload };
    if (interrupt.seq) body.step = interrupt.seq;
    await api(`${base}/reply`, { method: "POST", body });
    say(`Gate ${interrupt.id} answered with ${trigger}.`);
    await refresh();
    restartStream();
  }

  function gateCard(interrupt, n) {
    if (interrupt.kind === BUDGET_GATE) {
      return budgetGateCard(interrupt, n, {
        send: (trigger, payload) => sendReply(interrupt, trigger, payload),
        describe: (error) => (error instanceof ApiError ? problemText(error) : String(error)),
      });
    }
    if (interrupt.kind === OUTCOME_UNKNOWN) {
      const node = state.run.nodes[interrupt.node];
      return effectGateCard(interrupt, n, {
        triggers: triggersAt(state.shape, interrupt.node, node && node.path),
        send: (trigger, payload) => sendReply(interrupt, trigger, payload),
        describe: (error) => (error instanceof ApiError ? problemText(error) : String(error)),
      });
    }
    const feedback = h("textarea", { id: `feedback-${n}`, rows: 2, placeholder: "optional: sent as payload.feedback" });
    const status = h("p", { class: "message", role: "status" });
    const answer = async (trigger, buttons) => {
      buttons.forEach((b) => (b.disabled = true));
      status.textContent = `Sending ${trigger}…`;
      const text = feedback.value.trim();
      try {
        await sendReply(interrupt, trigger, text ? { feedback: text } : {});
        status.textContent = `Answered ${trigger}.`;
      } catch (error) {
        status.textContent = error instanceof ApiError ? problemText(error) : String(error);
        status.className = "message error";
        buttons.forEach((b) => (b.disabled = false));
      }
    };
    const buttons = [];
    for (const trigger of interrupt.answers || []) {
      buttons.push(h("button", { type: "button", class: "trigger", "data-trigger": trigger, onclick: () => answer(trigger, buttons) }, trigger));
    }
    return h("article", { class: `gate${interrupt.parked ? " parked" : ""}`, "aria-labelledby": `gate-h-${n}` },
      h("h2", { id: `gate-h-${n}` }, interrupt.parked ? "Parked: " : "Waiting: ", interrupt.kind, " at node ", h("strong", {}, interrupt.node)),
      h("p", { class: "muted" }, `asked ${when(interrupt.created_at)}`,
        interrupt.deadline ? ` · times out ${when(interrupt.deadline)}` : "", " · id ", h("span", { class: "mono" }, interrupt.id)),
      interrupt.reviewers && interrupt.reviewers.length
        ? h("p", { class: "reviewers" }, "Reviewers: ", interrupt.reviewers.join(", ")) : "",
      json(interrupt.payload),
      gateFiles(interrupt),
      h("label", { for: `feedback-${n}` }, "Feedback"), feedback,
      h("div", { class: "trigger-row", role: "group", "aria-label": "Answer with a trigger" }, buttons.length ? [...buttons, guardGate(interrupt.reviewers, [...buttons, feedback])] : h("span", { class: "muted" }, "This gate declares no triggers.")),
      status);
  }

  // The files the gate's payload names (notes.md…), their text as the server reads it
  // now: what the reviewer judges. Set as text, never read as markup.
  function gateFiles(interrupt) {
    const box = h("div", { class: "gate-files" });
    api(`${base}/gates/${enc(interrupt.id)}/files`).then((found) => {
      fill(box, found.files.map((file) => h("details", { class: "gate-file", open: true, "data-key": file.key },
        h("summary", {}, h("span", { class: "mono" }, file.path),
          file.truncated ? ` (cut: the first 64 KiB of ${file.bytes} bytes)` : ""),
        h("pre", {}, file.text))));
    }, () => {}); // answered meanwhile, or the server cannot say: the payload is shown
    return box;
  }

  // ------------------------------------------------------------------ timeline

  function row(record, previous) {
    // How long the step took: since the node's previous step (its action ran in between),
    // or since the run's previous step for a node's first one.
    const took = previous ? new Date(record.time) - new Date(previous.time) : NaN;
    const words = ledgerWords(record);
    const move = words ? h("span", { class: "effect-step" }, words)
      : record.trigger || record.source.length || record.dest.length
        ? [path(record.source), h("span", { class: "trig" }, ` → ${record.trigger || record.kind} → `), path(record.dest)]
        : h("span", { class: "muted" }, record.kind);
    const tr = h("tr", { "data-seq": record.seq, "data-node": record.node || "", class: record.seq === state.pick.seq ? "picked" : "" },
      h("td", { class: "num" }, h("button", { type: "button", class: "link seq", onclick: () => pickStep(record.seq) }, String(record.seq))),
      h("td", { class: "mono" }, clock(record.time)),
      h("td", {}, record.node || "—"),
      h("td", {}, move, record.errors.length ? h("span", { class: "err-dot", title: "errors logged" }, " !") : "", byWhom(record)),
      h("td", { class: "num" }, duration(took)));
    tr.addEventListener("click", (e) => {
      if (e.target.tagName !== "BUTTON") pickStep(record.seq);
    });
    return tr;
  }

  // Who decided a step: "confirmed by alice at 14:02:07", "started by local:ana at …".
  function byWhom(record) {
    if (!record.actor) return "";
    const at = clock(record.time).slice(0, 8);
    const trigger = record.trigger;
    const did = record.kind === "created" ? (record.result.forked_from ? "forked" : "started")
      : record.kind === "cancel" ? "cancelled"
        : trigger === "confirm" ? "confirmed" : trigger === "reject" ? "rejected" : `answered ${trigger || ""}`.trim();
    return h("span", { class: "actor muted" }, ` · ${did} by `, h("strong", {}, record.actor.name), ` at ${at}`);
  }

  function previousOf(index) {
    const record = state.records[index];
    for (let i = index - 1; i >= 0; i--) if (state.records[i].node === record.node) return state.records[i];
    return state.records[index - 1];
  }

  function filterRows() {
    const only = stepNode.value;
    for (const tr of rows.children) tr.hidden = Boolean(only) && tr.dataset.node !== only;
  }

  function renderTimeline() {
    fill(rows, ...state.records.map((r, i) => row(r, previousOf(i))));
    filterRows();
    earlier.hidden = state.first === 0;
    stepsBox.scrollTop = stepsBox.scrollHeight;
  }

  function appendRows(added) {
    // Keep following the newest steps unless the user scrolled up to read older ones.
    const atEnd = stepsBox.scrollTop + stepsBox.clientHeight >= stepsBox.scrollHeight - 30;
    const before = state.records.length - added.length;
    added.forEach((record, i) => rows.append(row(record, previousOf(before + i))));
    filterRows();
    if (atEnd) stepsBox.scrollTop = stepsBox.scrollHeight;
  }

  // -------------------------------------------------------------------- detail

  // The address says what is picked, so that it can be shared (no new history entry).
  function linkOf(node, seq) {
    const params = new URLSearchParams();
    if (node) params.set("node", node);
    if (seq !== null && seq !== undefined) params.set("seq", String(seq));
    const query = params.toString();
    return `#/runs/${enc(runId)}${query ? `?${query}` : ""}`;
  }

  function showPick() {
    if (!closed) history.replaceState(null, "", linkOf(state.pick.node, state.pick.seq));
  }

  function pickNode(id) {
    state.pick.node = id;
    state.pick.seq = null; // the node as it is now
    showPick();
    for (const tr of rows.querySelectorAll("tr.picked")) tr.classList.remove("picked");
    dag.select(id);
    renderNode(true);
    renderTalk();
  }

  function showStreamed() {
    const text = state.streamed[state.pick.node] || "";
    liveText.hidden = !text;
    if (text) fill(liveText, h("div", { class: "msg-head" }, h("strong", {}, "assistant"), h("span", { class: "muted small" }, " streaming…")), h("div", { class: "msg-text" }, text));
    if (text) talkPanel.hidden = false;
  }

  function renderTalk() {
    const id = state.pick.node;
    const last = state.records.length ? state.records[state.records.length - 1].seq : -1;
    const key = `${id}|${state.first}|${last}`;
    if (talkPanel.dataset.key === key) return;
    talkPanel.dataset.key = key;
    const talks = conversationsOf(state.records, id);
    // The live box stays in the page (hidden while empty): streamed text may come first.
    talkPanel.hidden = !talks.size && !state.streamed[id];
    // Keep the reader's place: a conversation read at its end follows new messages.
    const shown = talkPanel.querySelector(".talk");
    const place = shown && talkPanel.dataset.node === id ? shown.scrollTop : null;
    const atEnd = shown && shown.scrollTop + shown.clientHeight >= shown.scrollHeight - 30;
    talkPanel.dataset.node = id;
    fill(talkPanel, h("h2", {}, "Model conversation of ", h("span", { class: "mono" }, id)),
      state.first > 0 ? h("p", { class: "muted small" }, "Messages of steps before those loaded are not shown: use “Show earlier steps”.") : "",
      renderConversations(talks, liveText, ledgerOf(state.records, id)));
    const talk = talkPanel.querySelector(".talk");
    if (talk && place !== null) talk.scrollTop = atEnd ? talk.scrollHeight : place;
    showStreamed();
  }

  function renderNode(focus) {
    const id = state.pick.node;
    const view = state.run.nodes[id];
    const shape = state.shape.nodes[id];
    if (!view || !shape) {
      fill(nodePanel, h("h2", {}, "Node"), h("p", { class: "muted" }, "Pick a node in the graph."));
      return;
    }
    // A picked step of this node shows its machines as that step left them.
    const picked = state.records.find((r) => r.seq === state.pick.seq);
    const past = picked && picked.node === id && picked.dest.length ? picked : null;
    const shownPath = past ? past.dest : view.path;
    const ledger = ledgerOf(state.records, id);
    const ledgerKey = ledger.map((e) => `${e.id}${e.result ? "+" : ""}${e.on_unknown}`).join(",");
    // A node that plans lists its plan's versions; a plan's child shows what it handed back.
    const plans = shape.plan || Object.values(shape.hooks).some((hook) => hook.kind === "plan")
      ? planVersionsOf(state.records, id) : null;
    const result = shape.parent ? resultOf(state.records, id) : null;
    const planned = `${shape.plan ? shape.plan.version : ""}|${plans ? planKey(plans) : ""}|${JSON.stringify(result)}`;
    const key = `${id}|${view.state}|${view.status}|${view.steps}|${past ? past.seq : ""}|${ledgerKey}|${planned}`;
    if (!focus && nodePanel.dataset.key === key) return;
    nodePanel.dataset.key = key;
    const diagrams = past ? [h("p", { class: "past" }, `As step ${past.seq} left it (now: ${path(view.path)}).`)] : [];
    let machineName = shape.machine;
    shownPath.forEach((here, level) => {
      const machine = state.shape.machines[machineName];
      if (!machine) return;
      const visited = new Set(state.records.filter((r) => r.node === id).flatMap((r) => [r.source[level], r.dest[level]]).filter(Boolean));
      diagrams.push(h("h3", {}, level ? `Nested machine ${machineName}` : `Machine ${machineName}`),
        h("div", { class: "machine-box" }, drawMachine(machineName, machine, here, visited)));
      const nested = machine.states.find((st) => st.name === here);
      machineName = nested && nested.machine;
    });
    if (!shownPath.length && state.shape.machines[machineName]) {
      diagrams.push(h("h3", {}, `Machine ${machineName}`), h("div", { class: "machine-box" }, drawMachine(machineName, state.shape.machines[machineName], null)));
    }
    const heading = h("h2", { tabindex: -1 }, "Node ", h("span", { class: "mono" }, id));
    fill(nodePanel, heading, h("div", { class: "node-body" }, h("div", {},
      h("dl", { class: "facts" },
        h("dt", {}, "status"), h("dd", {}, badge(view.status), view.outcome ? ` outcome ${view.outcome}` : ""),
        h("dt", {}, "state"), h("dd", { class: "mono" }, path(view.path)),
        h("dt", {}, "steps"), h("dd", {}, String(view.steps), view.steps ? [" · ", h("button", { type: "button", class: "link", onclick: () => listSteps(id) }, "list its steps")] : ""),
        h("dt", {}, "needs"), h("dd", {}, shape.needs.length ? shape.needs.join(", ") : "—"),
        shape.parent ? childFacts(shape.parent, result, pickNode) : [],
        spendText(view.counters) ? [h("dt", {}, "model spend"), h("dd", { class: "mono node-spend" }, spendText(view.counters))] : [],
        Object.keys(view.counters).length ? [h("dt", {}, "budgets spent"), h("dd", { class: "mono" }, Object.entries(view.counters).map(([k, v]) => `${k} ${v}`).join(", "))] : [],
        view.error ? [h("dt", {}, "error"), h("dd", { class: "error" }, view.error)] : []),
      h("p", { class: "muted small" }, "In the diagram: the current state (or the picked step's) is filled, states this node passed through in the steps shown are shaded; dashed arrows lead back.")),
    h("div", { class: "machines" }, diagrams)), promptsOf(shape), ledgerTable(ledger),
    plans ? renderPlanVersions(id, shape.plan, plans, { onPick: pickNode, partial: state.first > 0 }) : "");
    if (focus) heading.focus();
  }

  // The steps table lists this node's steps alone (as the "Node" filter above it does).
  function listSteps(id) {
    stepNode.value = id;
    filterRows();
    stepNode.focus();
  }

  async function pickStep(seq, forking = false) {
    const record = state.records.find((r) => r.seq === seq);
    if (!record) return;
    state.pick.seq = seq;
    if (record.node) {
      state.pick.node = record.node;
      dag.select(record.node);
    }
    showPick();
    renderNode(false);
    renderTalk();
    for (const tr of rows.querySelectorAll("tr")) tr.classList.toggle("picked", Number(tr.dataset.seq) === seq);
    const snapshot = h("div", {}, h("p", { class: "muted" }, "Loading the snapshot…"));
    const patch = h("textarea", { id: "fork-patch", rows: 3, placeholder: '{"key": "new value"}', spellcheck: "false" });
    const forkStatus = h("p", { class: "message", role: "status" });
    const forkButton = h("button", { type: "submit" }, "Fork");
    const heading = h("h2", { tabindex: -1 }, `Step ${seq}`);
    fill(stepPanel, heading,
      h("p", { class: "small" }, h("a", { class: "step-link", href: linkOf(record.node, seq) }, "Link to this step")),
      h("dl", { class: "facts" },
        h("dt", {}, "time"), h("dd", {}, when(record.time), " ", h("span", { class: "muted" }, clock(record.time))),
        h("dt", {}, "kind"), h("dd", {}, record.kind),
        h("dt", {}, "node"), h("dd", {}, record.node || "—"),
        h("dt", {}, "move"), h("dd", { class: "mono" }, `${path(record.source)} → ${record.trigger || record.kind} → ${path(record.dest)}`),
        h("dt", {}, "run after"), h("dd", {}, badge(record.status))),
      record.ledger ? [h("h3", {}, `Ledger entry (${ledgerWords(record)})`), json(record.ledger)] : [],
      record.plan ? [h("h3", {}, `Plan version ${record.plan.version} committed`), json(record.plan)] : [],
      h("h3", {}, "Action result"), Object.keys(record.result).length ? json(record.result) : h("p", { class: "muted" }, "none"),
      h("h3", {}, "Data changed"), Object.keys(record.data).length ? json(record.data) : h("p", { class: "muted" }, "nothing"),
      Object.keys(record.appended || {}).length ? [h("h3", {}, "Appended to lists"), json(record.appended)] : [],
      record.errors.length ? [h("h3", {}, "Errors logged"), json(record.errors)] : [],
      record.events.length ? [h("h3", {}, "Events"), json(record.events)] : [],
      h("details", { open: true }, h("summary", {}, `Snapshot at step ${seq}`), snapshot),
      h("form", { class: "fork", onsubmit: async (e) => {
        e.preventDefault();
        let data;
        try {
          data = patch.value.trim() ? JSON.parse(patch.value) : undefined;
          if (data !== undefined && (typeof data !== "object" || Array.isArray(data) || data === null)) throw new Error("the patch must be a JSON object");
        } catch (error) {
          forkStatus.textContent = `Data patch: ${error.message}`;
          forkStatus.className = "message error";
          return;
        }
        try {
          const forked = await api(`${base}/fork`, { method: "POST", body: data ? { at_seq: seq, data } : { at_seq: seq } });
          location.hash = `#/runs/${enc(forked.run_id)}`;
        } catch (error) {
          forkStatus.textContent = problemText(error);
          forkStatus.className = "message error";
        }
      } },
      h("h3", {}, `Fork from step ${seq}`),
      h("p", { class: "muted small" }, "A new run starts from this step's state, with the patch merged into its data per top-level key; this run is only read."),
      h("label", { for: "fork-patch" }, "Data patch (JSON object, optional)"), patch,
      forkButton, guard("runs:fork", [forkButton, patch]), forkStatus));
    (forking ? patch : heading).focus();
    try {
      const snap = await api(`${base}/snapshot?seq=${seq}`);
      fill(snapshot, 
        h("p", { class: "muted small" }, `status ${snap.status} · ${snap.summary}`),
        h("h4", {}, "Data"), json(snap.data),
        h("h4", {}, "Nodes"),
        h("ul", { class: "plain" }, Object.entries(snap.nodes).map(([id, n]) =>
          h("li", {}, h("strong", {}, id), " ", badge(n.status), " ", h("span", { class: "mono" }, path(n.path))))));
    } catch (error) {
      fill(snapshot, h("p", { class: "error" }, problemText(error)));
    }
  }

  // -------------------------------------------------------- errors and replay

  function renderErrors() {
    if (errors.dataset.count === String(state.errors.length)) return;
    errors.dataset.count = String(state.errors.length);
    if (!state.errors.length) {
      fill(errors, h("p", { class: "muted" }, "No errors logged."));
      return;
    }
    fill(errors, h("div", { class: "table-wrap" }, h("table", { class: "errors" },
      h("thead", {}, h("tr", {}, ["Time", "Node", "State", "Severity", "Recovered", "Message"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, state.errors.map((e) => h("tr", { class: e.recovered ? "" : "unrecovered" },
        h("td", { class: "mono" }, clock(e.time)), h("td", {}, e.node), h("td", { class: "mono" }, e.state),
        h("td", {}, e.severity), h("td", {}, e.recovered ? "yes" : "no"),
        h("td", {}, e.message, Object.keys(e.details || {}).length ? h("details", {}, h("summary", {}, "details"), json(e.details)) : "")))))));
  }

  async function replay() {
    fill(replayOut, h("p", { class: "muted" }, "Replaying…"));
    try {
      const report = await api(`${base}/replay`, { method: "POST" });
      const note = report.graph_changed ? h("p", { class: "muted" }, "The graph's definition changed since the run started; the replay used the current one.") : "";
      if (report.identical) {
        fill(replayOut, h("p", { class: "ok" }, `Identical: replay reproduced all ${report.steps} steps up to step ${report.head}.`), note);
        return;
      }
      const d = report.divergence;
      fill(replayOut, 
        h("p", { class: "error" }, `Diverges at step ${d.seq}${d.node ? ` (node ${d.node})` : ""}: ${d.reason}`),
        d.fields.length ? h("p", {}, `Fields that differ: ${d.fields.join(", ")}`) : "",
        note,
        h("div", { class: "columns" }, h("div", {}, h("h3", {}, "Recorded"), json(d.recorded)),
          h("div", {}, h("h3", {}, "Replayed"), d.replayed ? json(d.replayed) : h("p", { class: "muted" }, "no step"))));
    } catch (error) {
      fill(replayOut, h("p", { class: "error" }, problemText(error)));
    }
  }

  start();
  return () => {
    closed = true;
    if (stream) stream.close();
  };
}

/** A node's model prompts as the run's stored definition has them (nothing for other nodes). */
function promptsOf(shape) {
  const shown = Object.entries(shape.hooks).filter(([, hook]) => hook.system || hook.prompt);
  if (!shown.length) return "";
  return h("section", { class: "prompts", "aria-label": "Prompts" },
    h("h3", {}, "Prompts"),
    h("p", { class: "muted small" }, "As this run's stored definition has them: what its model calls send, whatever the graph file says now."),
    shown.map(([hook, prompt]) => [
      prompt.system ? [h("h4", {}, `${hook}: system`), h("pre", { class: "prompt" }, prompt.system)] : [],
      prompt.prompt ? [h("h4", {}, `${hook}: prompt`), h("pre", { class: "prompt" }, prompt.prompt)] : [],
    ]));
}

function flatShape(run) {
  const ids = Object.keys(run.nodes);
  return {
    layers: [ids],
    nodes: Object.fromEntries(ids.map((id) => [id, { machine: "?", needs: [], hooks: {} }])),
    machines: {},
  };
}

// The node that tells the run's story: the one a gate waits on, the failed one, the one
// running, else the last node whose model answered (a finished agent's conversation).
function defaultNode(run, shape, records) {
  if (run.interrupts.length) return run.interrupts[0].node;
  const ids = shape.layers.flat();
  const first = (status) => ids.find((id) => run.nodes[id] && run.nodes[id].status === status);
  const talked = records.findLast((r) => r.node && ids.includes(r.node) && r.result && r.result.output && r.result.output.finish_reason);
  return first("failed") || first("running") || (talked && talked.node) || ids[0] || null;
}
