// Talking to the server: the key (in memory, and in this tab's sessionStorage), JSON calls whose
// errors carry the server's code and message (never a document's text), and server-sent events.
const STORED = "tokendp-key";
let key = "";

export const storedKey = () => sessionStorage.getItem(STORED) || "";

export function useKey(value) {
  key = value;
  sessionStorage.setItem(STORED, value);
}

export function headers(extra = {}) {
  return { Authorization: "Bearer " + key, "Content-Type": "application/json", ...extra };
}

export async function failure(response) {
  try { const body = await response.json(); return `${body.error.code}: ${body.error.message}`; }
  catch { return `HTTP ${response.status}`; }
}

// The JSON answer of `method path` (with `body` as JSON), or an Error with the server's message.
export async function call(method, path, body) {
  const init = { method, headers: headers() };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) throw new Error(await failure(response));
  return response.json();
}

async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const name = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (name && data) yield [name, JSON.parse(data)];
    }
  }
}

// Stream a release into `output` (token events append, the result replaces); the result's body.
export async function stream(response, output, onError) {
  let result = null;
  for await (const [name, data] of events(response)) {
    if (name === "token") output.textContent += data.text;
    else if (name === "result") { output.textContent = data.text; result = data; }
    else if (name === "error") onError(`${data.error.code}: ${data.error.message}`);
  }
  return result;
}
