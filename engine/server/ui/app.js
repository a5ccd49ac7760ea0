// The viewer's entry: the token prompt and a hash router (#/ runs, #/runs/ID a run,
// #/runs/ID?node=NODE&seq=SEQ a run opened on a node or a step).

import { loadPrincipal } from "./access.js";
import { ApiError, token } from "./api.js";
import { fill, h, problemText } from "./dom.js";
import { showRun } from "./run.js";
import { showRuns } from "./runs.js";

const main = document.getElementById("main");
const notice = document.getElementById("notice");
const forget = document.getElementById("forget");
const whoami = document.getElementById("whoami");
let leave = () => {};

function askToken(reason) {
  leave();
  leave = () => {};
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const form = h("form", { class: "token", onsubmit: (e) => {
    e.preventDefault();
    token.set(input.value.trim());
    route();
  } },
  h("h1", {}, "Token"),
  h("p", { class: reason ? "error" : "" }, reason),
  h("p", {}, "Give the token this server was started with (",
    h("code", {}, "phasegraph serve --token"), " or ", h("code", {}, "PHASEGRAPH_TOKEN"),
    "), a token of its token file (", h("code", {}, "phasegraph tokens add"),
    ") or a JWT from your team's identity provider. It is kept in this tab only, until you close it."),
  h("label", { for: "token" }, "Token"), " ", input, " ",
  h("button", { type: "submit" }, "Use token"));
  fill(main, form);
  forget.hidden = true;
  whoami.textContent = "";
  input.focus();
}

async function route() {
  leave();
  leave = () => {};
  notice.textContent = "";
  // One cheap call tells whether the token (or none) is accepted, and what it may do,
  // before a view starts.
  let me;
  try {
    me = await loadPrincipal();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      const had = token.get();
      askToken(had ? "The server refused this token: check it and try again." : "This server needs a token.");
      return;
    }
    fill(main, h("h1", {}, "Runs"), h("p", { class: "error", role: "alert" }, problemText(error)),
      h("button", { type: "button", onclick: route }, "Try again"));
    return;
  }
  forget.hidden = !token.get();
  whoami.textContent = token.get() ? `signed in as ${me.name}` : "";
  whoami.title = `scopes: ${me.scopes.join(" ") || "none"}${me.groups.length ? ` · groups: ${me.groups.join(" ")}` : ""}`;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query = ""] = hash.split("?");
  const match = path.match(/^\/runs\/([^/]+)$/);
  if (match) leave = showRun(main, decodeURIComponent(match[1]), new URLSearchParams(query));
  else leave = showRuns(main, new URLSearchParams(query));
}

forget.addEventListener("click", () => {
  token.clear();
  askToken("");
});
window.addEventListener("pg-unauthorized", () => {
  if (!document.getElementById("token")) askToken(token.get() ? "The server refused this token: check it and try again." : "This server needs a token.");
});
window.addEventListener("hashchange", route);
route();
