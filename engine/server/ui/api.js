// The server's JSON API and event stream, with the bearer token kept in sessionStorage.
// Nothing here touches the page: views call these functions and render what comes back.

const TOKEN_KEY = "phasegraph.token";

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** An answer that is not 2xx: `status` (0 when the server did not answer) and the problem. */
export class ApiError extends Error {
  constructor(status, problem) {
    const detail = (problem && (problem.detail || problem.title)) || `HTTP ${status}`;
    super(detail);
    this.status = status;
    this.problem = problem || {};
  }
}

function headers(extra) {
  const result = { Accept: "application/json", ...extra };
  const value = token.get();
  if (value) result.Authorization = `Bearer ${value}`;
  return result;
}

/** Call the API; resolve to the parsed JSON body, reject with an ApiError. */
export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json"; // the server takes JSON bodies only
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, { detail: `the server does not answer (${error.message})` });
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { detail: text.slice(0, 300) };
  }
  if (!response.ok) {
    const error = new ApiError(response.status, parsed);
    if (response.status === 401) window.dispatchEvent(new CustomEvent("pg-unauthorized"));
    throw error;
  }
  return parsed;
}

export const enc = encodeURIComponent;

/** One Server-Sent Events block → {id, event, data} (data parsed as JSON), or null. */
function parseBlock(block) {
  const fields = {};
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const at = line.indexOf(":");
    const name = at < 0 ? line : line.slice(0, at);
    const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
    fields[name] = name === "data" && fields.data !== undefined ? `${fields.data}\n${value}` : value;
  }
  if (fields.data === undefined) return null;
  return { id: fields.id, event: fields.event, data: JSON.parse(fields.data) };
}

/**
 * Follow a run's event stream. EventSource cannot send the Authorization header, so this
 * reads the stream with fetch. After a dropped connection it reconnects with
 * Last-Event-ID (the last event seen, a model's streamed text included): the server sends
 * exactly what was missed.
 *
 * on.events(list) gets each batch of committed events; on.live(event) each live one (a
 * model's streamed text, or a stream_gap marker), before the batch it came with; on.state(text) "live" | "reconnecting" | "ended" |
 * "stopped"; on.ended() is awaited when the server ends the stream and answers whether to
 * connect again (a server shutting down ends streams of unfinished runs too).
 */
export function follow(runId, after, on) {
  let last = after;
  let stopped = false;
  let controller = null;

  async function once() {
    controller = new AbortController();
    const extra = { Accept: "text/event-stream" };
    if (last) extra["Last-Event-ID"] = last;
    const response = await fetch(`/runs/${enc(runId)}/events`, {
      headers: headers(extra),
      signal: controller.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      let problem = null;
      try {
        problem = await response.json();
      } catch {
        problem = null;
      }
      throw new ApiError(response.status, problem);
    }
    on.state("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      const batch = [];
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = parseBlock(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (!event) continue;
        // Every event has an id, live ones (a model's streamed text) too: a reconnect
        // resumes after the last one seen. A gap marker (live events the server no
        // longer keeps) has none.
        if (event.id) last = event.id;
        if (event.data && event.data.live) {
          if (on.live) on.live(event.data);
        } else if (event.id) batch.push(event.data);
      }
      if (batch.length) on.events(batch);
    }
  }

  (async () => {
    let delay = 1000;
    while (!stopped) {
      try {
        await once();
        if (stopped) break;
        if (!(await on.ended())) {
          on.state("ended");
          return;
        }
        delay = 1000;
      } catch (error) {
        if (stopped) break;
        if (error instanceof ApiError && error.status >= 400 && error.status < 500) {
          if (error.status === 401) window.dispatchEvent(new CustomEvent("pg-unauthorized"));
          on.state("stopped", error);
          return;
        }
        on.state("reconnecting");
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10000);
    }
  })();

  return {
    close() {
      stopped = true;
      if (controller) controller.abort();
    },
  };
}
