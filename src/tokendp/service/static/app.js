// The tokendp page: asks the server which role the key has (GET /v1/whoami), then shows that
// role's view. The owner's view holds the vault (owner.js) and the per-request panel
// (sanitize.js); a reader's view (reader.js) never fetches a document's text, spans or ledger.
import { call, storedKey, useKey } from "./api.js";
import { $ } from "./dom.js";
import { showOwner } from "./owner.js";
import { showReader } from "./reader.js";
import { showSanitize } from "./sanitize.js";

const KEY_SHAPE = /^tdp_[A-Za-z0-9_-]{43}$/;  // what `tokendp keys create` prints
let identified = null;  // the key whose view is shown

// A key is identified once per page: another key reloads the page, so that nothing one key
// loaded stays in the page for the next.
async function identify() {
  const key = $("key").value.trim();
  if (!key || key === identified) return;
  useKey(key);
  if (identified !== null) { location.reload(); return; }
  identified = key;
  let who;
  try { who = await call("GET", "/v1/whoami"); } catch (err) { $("key-error").textContent = err.message; return; }
  $("key-error").textContent = "";
  $("whoami").textContent = `${who.role} of ${who.tenant}`;
  $("intro").hidden = true;
  if (who.role === "owner") {
    $("owner-view").hidden = false;
    showSanitize();
    await showOwner();
  } else {
    $("reader-view").hidden = false;
    await showReader();
  }
}

$("key").oninput = () => { if (KEY_SHAPE.test($("key").value.trim())) identify(); };
$("key").onchange = identify;
$("key").value = storedKey();
identify();
