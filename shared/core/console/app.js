// The operator console: every view is a request to the control plane (POST operations), made as
// the signed-in person in their role; the control plane answers it or refuses it. What this page
// hides from a role (a button) is a convenience: the refusal is the server's.
//
// Text from envelopes is shown with textContent, never parsed as HTML.

const OPERATIONS = "operations";
const store = window.sessionStorage;
let me = null; // whoami: {identity, role}

// ---- DOM ----------------------------------------------------------------------------------

function h(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
}

function notice(text, bad) {
  const box = h("div", { class: bad ? "bad" : "" }, text);
  document.getElementById("notice").append(box);
  setTimeout(() => box.remove(), 8000);
}

function table(head, rows, numeric = []) {
  if (!rows.length) return h("p", { class: "muted" }, "None.");
  return h("table", {},
    h("thead", {}, h("tr", {}, head.map((t, i) => h("th", { scope: "col", class: numeric.includes(i) ? "num" : "" }, t)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : "" }, c))))));
}

function fields(pairs) {
  return h("dl", { class: "fields" }, pairs.filter(([, v]) => v !== undefined).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")]));
}

function badge(text) {
  return h("span", { class: `badge ${text}` }, text);
}

function amounts(tally) {
  if (!tally) return "";
  const parts = Object.entries(tally.amounts || {}).map(([c, a]) => `${a} ${c}`);
  if (tally.without_amount) parts.push(`${tally.without_amount} without amount`);
  for (const c of tally.overflowed || []) parts.push(`${c}: too large to total exactly`);
  return parts.join("; ");
}

function age(at) {
  const s = Math.max(0, (Date.now() - Date.parse(at)) / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 172800) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

function when(at) {
  return at ? at.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", "Z") : "—";
}

// ---- The control plane ----------------------------------------------------------------------

async function ask(body) {
  const token = store.getItem("token");
  const headers = { "content-type": "application/json", authorization: `Bearer ${token}` };
  // Signed in through an identity provider: the role chosen among those the groups give.
  if (store.getItem("role")) headers["x-operator-role"] = store.getItem("role");
  const response = await fetch(OPERATIONS, { method: "POST", headers, body: JSON.stringify(body) });
  let answer = {};
  try {
    answer = await response.json();
  } catch {
    answer = { message: `the control plane answered ${response.status} without JSON` };
  }
  if (response.status === 401) {
    store.removeItem("token");
    location.hash = "#/sign-in";
  }
  if (!response.ok) {
    const error = new Error(answer.message || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return answer;
}

/// Ask, and say a refusal in the notice area (null when refused); `button`, if given, is
/// disabled meanwhile (a second click would ask twice).
async function attempt(body, button) {
  if (button) button.disabled = true;
  try {
    return await ask(body);
  } catch (e) {
    notice(`Refused (${e.status || "error"}): ${e.message}`, true);
    return null;
  } finally {
    if (button) button.disabled = false;
  }
}

const may = (...roles) => me && roles.includes(me.role);

/// The person an identity names: a console sign-in's name (console/ACCOUNT/ROLE/NAME/SUBJECT), a
/// role session's name (…/ROLE/SESSION).
function person(identity) {
  if (identity.name) return identity.name;
  const parts = identity.arn.split("/");
  return identity.arn.startsWith("console/") ? parts[3] : parts[parts.length - 1];
}

// ---- Routing: #/view/ID?query (the filters stay in the address, to share a view) ----------

function route() {
  const [path, query] = location.hash.slice(1).split("?");
  const parts = (path || "/triage").split("/").filter(Boolean);
  return { view: parts[0] || "triage", id: parts.slice(1).join("/"), q: new URLSearchParams(query || "") };
}

function go(view, params) {
  const q = new URLSearchParams(Object.entries(params || {}).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  location.hash = `#/${view}${q.toString() ? `?${q}` : ""}`;
}

const views = {
  "sign-in": signIn,
  triage,
  envelopes,
  envelope,
  propose,
  requests,
  request,
  evidence,
};

// Renders one after another, each for the address as it is when it starts: a slower one for an
// address left since (its answer came late) cannot replace the view of the one after it.
let rendered = Promise.resolve();
function render() {
  rendered = rendered.then(renderNow, renderNow);
  return rendered;
}

async function renderNow() {
  const { view, id, q } = route();
  if (view !== "sign-in" && !store.getItem("token")) return go("sign-in");
  if (view !== "sign-in" && !me) {
    me = await attempt({ operation: "whoami" });
    if (!me) return;
    document.getElementById("who").replaceChildren(
      h("span", { id: "signed-in" }, `${person(me.identity)} · ${me.role || "no role"}`), " ",
      h("button", { class: "secondary", onclick: signOut }, "Sign out"));
  }
  try {
    await (views[view] || triage)(id, q);
  } catch (e) {
    show(h("h1", {}, "Could not show this view"), h("p", { class: "bad" }, e.message));
  }
  document.getElementById("main").focus();
}

function signOut() {
  const token = store.getItem("token");
  if (!store.getItem("role")) {
    fetch("local/sign-out", { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: "{}" });
  }
  store.removeItem("token");
  store.removeItem("role");
  me = null;
  document.getElementById("who").replaceChildren();
  go("sign-in");
}

// ---- Views ------------------------------------------------------------------------------------

// ---- Sign-in through an OpenID Connect provider: authorization code with PKCE ---------------
// The page is a public client: it proves the code is its own with a one-time verifier, keeps the
// ID token for this tab only (sessionStorage), and sends it to the control plane, whose API's JWT
// authorizer verifies it (signature, issuer, audience, expiry).

const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
const random = (n) => b64url(crypto.getRandomValues(new Uint8Array(n)));
const redirectUri = () => `${location.origin}${location.pathname}`;

async function discovery(config) {
  const response = await fetch(`${config.issuer.replace(/\/$/, "")}/.well-known/openid-configuration`);
  if (!response.ok) throw new Error(`the identity provider's discovery document: HTTP ${response.status}`);
  return response.json();
}

async function providerSignIn(config, role) {
  const d = await discovery(config);
  const verifier = random(32);
  const challenge = b64url(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier))));
  const state = random(16);
  store.setItem("pkce", JSON.stringify({ verifier, state, role }));
  const url = new URL(d.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code", client_id: config.client_id, redirect_uri: redirectUri(), scope: "openid email",
    state, code_challenge: challenge, code_challenge_method: "S256",
  });
  location.assign(url.toString());
}

/// Back from the provider with a code: exchanged for the ID token, if the state is the one this
/// tab sent. True when signed in.
async function providerReturn() {
  const params = new URLSearchParams(location.search);
  const code = params.get("code");
  if (!code && !params.get("error")) return false;
  const saved = JSON.parse(store.getItem("pkce") || "{}");
  store.removeItem("pkce");
  history.replaceState(null, "", location.pathname + location.hash);
  if (params.get("error")) return notice(`The identity provider refused the sign-in: ${params.get("error")}`, true), false;
  if (!saved.state || saved.state !== params.get("state")) return notice("This sign-in was not started here: refused.", true), false;
  const config = await (await fetch("config.json")).json();
  const d = await discovery(config);
  const response = await fetch(d.token_endpoint, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "authorization_code", code, redirect_uri: redirectUri(), client_id: config.client_id, code_verifier: saved.verifier }),
  });
  const tokens = await response.json().catch(() => ({}));
  if (!response.ok || !tokens.id_token) return notice(`The identity provider gave no token: ${tokens.error || response.status}`, true), false;
  store.setItem("token", tokens.id_token);
  store.setItem("role", saved.role);
  return true;
}

async function signIn() {
  const config = await (await fetch("config.json")).json();
  if (config.sign_in === "oidc") {
    const role = h("select", { id: "role", name: "role" }, config.roles.map((r) => h("option", { value: r }, r)));
    const form = h("form", { class: "signin", onsubmit: (ev) => { ev.preventDefault(); providerSignIn(config, role.value).catch((e) => notice(e.message, true)); } },
      h("p", { class: "muted" }, `${config.stack}: you sign in with your organisation's identity provider; act in one of the operator roles your groups give. The control plane decides what the role may do.`),
      h("label", {}, "Role", role), h("button", { type: "submit", id: "provider-sign-in" }, "Sign in with your identity provider"));
    show(h("h1", {}, "Sign in"), form);
    return;
  }
  if (config.sign_in !== "local") {
    show(h("h1", {}, "Sign in"), h("p", {}, "This console signs in through your organisation's identity provider."));
    return;
  }
  const person = h("input", { id: "person", name: "person", required: true, autocomplete: "username", pattern: "[A-Za-z0-9+=,.@_\\-]{2,64}" });
  const role = h("select", { id: "role", name: "role" }, config.roles.map((r) => h("option", { value: r }, r)));
  const form = h("form", { class: "signin", onsubmit: async (ev) => {
    ev.preventDefault();
    const response = await fetch("local/sign-in", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ person: person.value, role: role.value }),
    });
    const answer = await response.json();
    if (!response.ok) return notice(answer.message, true);
    store.setItem("token", answer.token);
    me = null;
    go("triage");
  } },
  h("p", { class: "muted" }, `Local sign-in (${config.stack}): act as a person in one operator role, as an identity provider's groups would give it. The control plane decides what the role may do.`),
  h("label", {}, "Person", person), h("label", {}, "Role", role), h("button", { type: "submit" }, "Sign in"));
  show(h("h1", {}, "Sign in"), form);
  person.focus();
}

async function triage() {
  const t = await ask({ operation: "triage" });
  const rows = t.groups.map((g) => {
    const filter = { failure_code: g.failure_code, root_cause: g.root_cause };
    return [
      g.failure_code,
      h("a", { href: `#/envelopes?${new URLSearchParams(filter)}` }, g.root_cause),
      g.count,
      amounts(g),
      (g.entities || []).join(", "),
      `${age(g.oldest)} (${when(g.oldest)})`,
      g.decide_before || "—",
      may("maker") ? h("span", {},
        h("button", { class: "secondary", onclick: () => go("propose", { action: "replay", ...filter }) }, "Propose replay"), " ",
        h("button", { class: "secondary", onclick: () => go("propose", { action: "quarantine", ...filter }) }, "Quarantine")) : "",
    ];
  });
  show(
    h("h1", {}, "Triage: money at risk by failure"),
    h("p", { class: "muted" }, `${t.envelopes} pending envelopes in ${t.groups.length} groups, read ${when(t.at)}. `
      + (t.counted === "totals"
        ? "From the totals the store keeps with every change; oldest to the hour."
        : "Counted envelope by envelope: this table's totals do not cover every envelope (slow at a large backlog).")),
    table(["Failure code", "Root cause", "Count", "Amount", "Entities", "Oldest", "Decide before", ""], rows, [2]),
  );
}

const STATUSES = ["PENDING", "REPLAYING", "REPLAYED", "SUPPRESSED_DUPLICATE", "QUARANTINED", "SUPERSEDED"];
const FILTERS = ["status", "failure_code", "root_cause", "entity", "currency", "min_age_hours", "text"];

async function envelopes(_, q) {
  const inputs = Object.fromEntries(FILTERS.map((f) => [f, f === "status"
    ? h("select", { name: f }, STATUSES.map((s) => h("option", { value: s, selected: (q.get(f) || "PENDING") === s }, s)))
    : h("input", { name: f, value: q.get(f) || "", size: f === "text" ? 24 : 14, type: f === "min_age_hours" ? "number" : "text", min: 0 })]));
  const form = h("form", { class: "filters", onsubmit: (ev) => {
    ev.preventDefault();
    go("envelopes", Object.fromEntries(FILTERS.map((f) => [f, inputs[f].value])));
  } }, FILTERS.map((f) => h("label", {}, f.replaceAll("_", " "), inputs[f])), h("button", { type: "submit" }, "Filter"));

  const query = { operation: "envelopes", limit: 50 };
  for (const f of FILTERS) if (q.get(f)) query[f] = f === "min_age_hours" ? Number(q.get(f)) : q.get(f);
  if (q.get("cursor")) query.cursor = q.get("cursor");
  let page;
  try {
    page = await ask(query);
  } catch (e) {
    // The form stays, to mend the filter the control plane refused.
    return show(h("h1", {}, "Envelopes"), form, h("p", { class: "bad" }, e.message));
  }

  const boxes = [];
  const rows = page.envelopes.map((e) => {
    const box = h("input", { type: "checkbox", value: e.envelope_id, "aria-label": `select ${e.envelope_id}` });
    boxes.push(box);
    return [
      may("maker") ? box : "",
      h("a", { href: `#/envelope/${encodeURIComponent(e.envelope_id)}` }, e.envelope_id.slice(0, 18)),
      e.status, e.failure_code, e.root_cause, e.entity || "—",
      e.amount ? `${e.amount} ${e.currency || ""}` : "—",
      e.accounting_period || "—", when(e.dead_lettered_at), e.attempt_count,
    ];
  });
  const selected = () => boxes.filter((b) => b.checked).map((b) => b.value);
  const actions = may("maker") ? h("div", { class: "actions" },
    h("button", { onclick: () => selected().length ? go("propose", { action: "replay", ids: selected().join(",") }) : notice("Select envelopes first", true) }, "Propose replay of selected"),
    h("button", { class: "secondary", onclick: () => selected().length ? go("propose", { action: "quarantine", ids: selected().join(",") }) : notice("Select envelopes first", true) }, "Quarantine selected")) : "";
  const next = page.cursor
    ? h("button", { class: "secondary", onclick: () => go("envelopes", { ...Object.fromEntries(q), cursor: page.cursor }) }, "Next page")
    : h("span", { class: "muted" }, "Last page.");
  show(
    h("h1", {}, "Envelopes"), form, actions,
    h("p", { class: "muted" }, `${page.envelopes.length} shown; ${page.scanned} read for this page.`),
    table(["", "Envelope", "Status", "Code", "Root cause", "Entity", "Amount", "Period", "Dead-lettered (UTC)", "Attempts"], rows, [9]),
    h("div", { class: "actions" }, next),
  );
}

function envelopeLink(id) {
  return h("a", { href: `#/envelope/${encodeURIComponent(id)}` }, id.slice(0, 18));
}

/// The WORM copy as the bucket holds it: its versions, whether the first still hashes to what
/// the envelope names, and whether the envelope as the table holds it still makes that copy.
function wormCopy(w) {
  if (!w) return [h("p", { class: "muted" }, "No WORM copy named, or it was not read.")];
  const both = [w.first_version_matches, w.envelope_matches];
  const verdict = both.includes(false) ? "DIFFERS" : both.every((m) => m === true) ? "MATCHES" : "UNREAD";
  const said = (m, yes, no) => m === true ? yes : m === false ? no : "not read";
  return [
    fields([
      ["Object", `s3://${w.bucket}/${w.key}`], ["SHA-256 named", w.sha256],
      ["First version", w.first_version || (w.other_bucket ? `not read: this deployment's bucket is ${w.other_bucket}` : "none in the bucket")],
      ["Its bytes", said(w.first_version_matches, "hash to the SHA-256 named", "do not hash to the SHA-256 named")],
      ["The envelope in the table", said(w.envelope_matches, "makes exactly these bytes", "no longer makes these bytes: changed since it was copied")],
      ["Verdict", h("span", { id: "worm-verdict", class: `badge ${verdict}` }, verdict)],
    ]),
    table(["Version", "Kind"], w.versions.map((v) => [v.version_id, v.delete_marker ? "delete marker" : "object"])),
  ];
}

async function envelope(id) {
  const { envelope: e, body, worm, records, lineage, unread } = await ask({ operation: "envelope", envelope_id: decodeURIComponent(id) });
  const parts = [
    h("h1", {}, "Envelope ", h("code", {}, e.envelope_id)),
    ...unread.map((u) => h("p", { class: "warn" }, `Not read: ${u}`)),
    fields([
      ["Status", badge(e.status)], ["Failure", `${e.failure_code} · ${e.root_cause}`], ["Error", e.error_detail],
      ["Attempts", e.attempt_count], ["Entity", e.ledger_entity], ["Amount", e.amount ? `${e.amount} ${e.currency || ""}` : null],
      ["Period", e.accounting_period], ["Source hash", e.source_hash], ["Dead-lettered", when(e.dead_lettered_at)],
      ["Copy of", lineage.replay_of ? envelopeLink(lineage.replay_of) : "— (as the producer sent it)"],
    ]),
    h("h2", {}, "Verbatim original"),
    h("pre", { id: "body" }, body ?? "(not kept)"),
    h("h2", {}, "Attributes"),
    table(["Name", "Type", "Value"], Object.entries(e.original.attributes || {}).map(([k, a]) => [k, a.data_type || "", a.string_value ?? a.binary_value ?? ""])),
    h("h2", {}, "Status history"),
    table(["At", "Status", "By", "Reason"], (e.status_history || []).map((c) => [when(c.at), c.status, c.actor, c.reason])),
    h("h2", {}, "Replays (lineage)"),
    table(["At", "Replay", "By", "Outcome", "Copy", "Reason"], (e.replays || []).map((r) => [when(r.at), r.replay_id, r.triggered_by, r.outcome, r.copy_source_hash || "—", r.reason])),
    h("h2", {}, "What each copy became"),
    h("div", { id: "copies" }, table(["Replay", "Copy's SQS message", "Fate", "Envelope"], lineage.copies.map((c) => [c.replay_id, c.sqs_message_id, c.fate, c.envelope_id ? envelopeLink(c.envelope_id) : "—"]))),
    h("h2", {}, "In the ledger"),
    table(["Transaction", "Period", "Held by"], lineage.ledger.map((l) => [l.source_hash, l.period || "—",
      l.held_by ? (l.unlisted_delivery ? `${l.held_by}: not the message as sent, nor a copy this page lists` : l.held_by) : "nothing: not posted"])),
    lineage.replays_not_read ? h("p", { class: "muted" }, `The records and copies of ${lineage.replays_not_read} older replays were not read.`) : "",
    h("h2", {}, "WORM copy"),
    ...wormCopy(worm),
    h("h2", {}, "Audit records"),
    h("p", { class: "muted" }, "As the audit table holds them now; the Evidence page verifies the trail against the bucket's seals."),
    h("div", { id: "records" }, table(["At", "Kind", "By", "Detail"], records.map((r) => [when(r.at), r.kind, r.actor, r.detail]))),
  ];
  if (may("maker") && e.status === "PENDING") parts.push(editForm(e, body));
  show(...parts);
}

const EDITABLE = ["ledger_entity", "currency", "amount", "value_date", "external_ref", "counterparty", "match_decision", "trace_id"];

function editForm(e, body) {
  let original = {};
  try { original = JSON.parse(body || "{}"); } catch { original = {}; }
  const inputs = Object.fromEntries(EDITABLE.map((f) => [f, h("input", { name: f, value: original[f] ?? "", size: 18 })]));
  const reason = h("input", { name: "reason", size: 50, required: true });
  return h("form", { id: "edit", onsubmit: async (ev) => {
    ev.preventDefault();
    const set = EDITABLE.filter((f) => inputs[f].value !== String(original[f] ?? "")).map((f) => [f, inputs[f].value]);
    if (!set.length) return notice("Nothing changed", true);
    const answer = await attempt({ operation: "edit", envelope_id: e.envelope_id, proposal: { set }, reason: reason.value }, ev.submitter);
    if (answer) go(`request/${answer.request_id}`);
  } },
  h("h2", {}, "Propose an edit"),
  h("p", { class: "muted" }, "An edit is always a request: another person approves it before the edited body is posted."),
  h("div", { class: "filters" }, EDITABLE.map((f) => h("label", {}, f.replaceAll("_", " "), inputs[f]))),
  h("label", {}, "Reason (audited)", reason), h("div", { class: "actions" }, h("button", { type: "submit" }, "Propose edit")));
}

function selector(q) {
  const s = {};
  if (q.get("ids")) s.envelope_ids = q.get("ids").split(",");
  for (const f of ["failure_code", "root_cause", "entity"]) if (q.get(f)) s[f] = q.get(f);
  return s;
}

async function propose(_, q) {
  const action = q.get("action") === "quarantine" ? "quarantine" : "replay";
  const scope = selector(q);
  const reason = h("input", { id: "reason", size: 60, required: true, value: q.get("reason") || "" });
  const slice = h("input", { id: "canary", size: 6, placeholder: "e.g. 1 or 10%" });
  const maxFail = h("input", { id: "canary-max-failure", type: "number", min: 0, max: 100, value: 0, size: 4 });
  const wait = h("input", { id: "canary-wait", type: "number", min: 1, value: 30, size: 4 });
  const out = h("div", { id: "dry-run" });
  const canary = () => {
    const v = slice.value.trim();
    if (!v) return undefined;
    const s = v.endsWith("%") ? { percent: Number(v.slice(0, -1)) } : { count: Number(v) };
    return { slice: s, max_failure_percent: Number(maxFail.value), wait_secs: Number(wait.value) };
  };
  const dry = async (button) => {
    const answer = await attempt({ operation: action, reason: reason.value, dry_run: true, ...scope }, button);
    if (!answer) return;
    const r = answer.report;
    const submit = h("button", { id: "submit", onclick: async () => {
      const done = await attempt({ operation: action, reason: reason.value, canary: canary(), ...scope }, submit);
      if (done?.request) go(`request/${done.request.request_id}`);
      else if (done) out.replaceChildren(h("h2", {}, "Ran (within the approval policy)"), report(done.report));
    } }, answer.needs_approval.length ? "Ask for approval" : "Run now");
    out.replaceChildren(
      h("h2", {}, "Dry run: each gate's decision"), report(r),
      answer.needs_approval.length
        ? h("p", { class: "warn" }, "Needs a second person: ", answer.needs_approval.join("; "))
        : h("p", {}, "Within the approval policy: it runs at once."),
      h("div", { class: "actions" }, h("label", {}, "Canary slice", slice), h("label", {}, "Max failure %", maxFail), h("label", {}, "Wait (s)", wait), submit));
  };
  show(
    h("h1", {}, `Propose a ${action}`),
    fields(Object.entries(scope).map(([k, v]) => [k.replaceAll("_", " "), Array.isArray(v) ? v.join(", ") : v])),
    h("form", { class: "actions", onsubmit: (ev) => { ev.preventDefault(); dry(ev.submitter); } },
      h("label", {}, "Reason (audited)", reason), h("button", { type: "submit", id: "dry" }, "Dry run")),
    out);
  reason.focus();
}

function report(r) {
  return h("div", {},
    table(["Selected", "Re-injected", "Duplicates", "Still failing", "Quarantined", "Skipped", "Amount"],
      [[r.selected, r.reinjected, r.suppressed_duplicate, r.still_failing, r.quarantined, r.skipped, amounts(r.exposure?.gross)]], [0, 1, 2, 3, 4, 5]),
    r.stopped ? h("p", { class: "warn" }, `Stopped: ${r.stopped}`) : "",
    r.canary ? h("p", { class: r.canary.passed ? "ok" : "bad", id: "canary-result" },
      `Canary: a slice of ${r.canary.size}: ${r.canary.committed} committed, ${r.canary.dead_lettered} dead-lettered, ${r.canary.unknown} unknown after ${(r.canary.waited_ms / 1000).toFixed(1)} s: ${r.canary.passed ? "passed, the rest went on" : "FAILED, the rest waits (PAUSED)"}`) : "",
    h("h2", {}, "Per envelope"),
    table(["Envelope", "Outcome", "Gate", "Detail"], (r.items || []).map((i) => [i.envelope_id.slice(0, 18), i.outcome, i.gate || "—", i.detail])));
}

async function requests(_, q) {
  const page = await ask({ operation: "requests", cursor: q.get("cursor") || undefined });
  const rows = page.requests.map((r) => [
    h("a", { href: `#/request/${r.request_id}` }, r.request_id),
    badge(r.request_status), r.action, r.reason, person(r.requested_by),
    when(r.created_at), r.exposure.count, amounts(r.exposure.gross),
  ]);
  show(h("h1", {}, "Approval requests"),
    table(["Request", "Status", "Action", "Reason", "Requested by", "Created (UTC)", "Envelopes", "Amount"], rows, [6]),
    page.cursor ? h("button", { class: "secondary", onclick: () => go("requests", { cursor: page.cursor }) }, "Next page") : "");
}

async function request(id) {
  const r = await ask({ operation: "request", request_id: id });
  const reason = h("input", { id: "decision-reason", size: 50 });
  const progress = h("div", { id: "progress", "aria-live": "polite" });
  const decide = (operation) => async (ev) => {
    if (await attempt({ operation, request_id: r.request_id, reason: reason.value }, ev.currentTarget)) render();
  };
  const execute = async (ev) => {
    ev.currentTarget.disabled = true;
    progress.replaceChildren(h("p", {}, "Running…"));
    let running = true;
    const poll = async () => {
      while (running) {
        const now = await attempt({ operation: "request", request_id: r.request_id });
        if (now && running) progress.replaceChildren(h("p", {}, "Status: ", badge(now.request_status), " ", now.execution?.summary || ""));
        await new Promise((ok) => setTimeout(ok, 1000));
      }
    };
    poll();
    const done = await attempt({ operation: "execute", request_id: r.request_id });
    running = false;
    if (done) {
      progress.replaceChildren(h("h2", {}, "Result: ", badge(done.request.request_status)), report(done.report));
      notice(`Request ${r.request_id}: ${done.request.request_status}`);
    } else progress.replaceChildren();
  };
  const actions = [];
  if (r.request_status === "PENDING_APPROVAL" && may("approver")) {
    actions.push(h("label", {}, "Reason", reason), h("button", { id: "approve", onclick: decide("approve") }, "Approve"), h("button", { class: "danger", id: "reject", onclick: decide("reject") }, "Reject"));
  }
  if (r.request_status === "PENDING_APPROVAL" && may("maker")) {
    actions.push(h("label", {}, "Reason", reason), h("button", { class: "secondary", id: "withdraw", onclick: decide("reject") }, "Withdraw"));
  }
  if ((r.request_status === "APPROVED" && may("maker", "approver")) || (["PAUSED", "EXECUTING"].includes(r.request_status) && may("approver"))) {
    actions.push(h("button", { id: "execute", onclick: execute }, r.request_status === "APPROVED" ? "Execute" : "Resume"));
  }
  const set = (r.set?.changes || []).map((c) => [c.envelope_id.slice(0, 18), c.outcome, c.amount ? `${c.amount} ${c.currency || ""}` : "—", c.entity || "—", c.period || "—", c.closed_period ? "closed" : ""]);
  show(
    h("h1", {}, "Request ", h("code", {}, r.request_id), " ", badge(r.request_status)),
    fields([
      ["Action", r.action], ["Reason", r.reason], ["Requested by", person(r.requested_by)],
      ["Created", when(r.created_at)], ["Expires", when(r.expires_at)], ["Why approval", (r.why || []).join("; ")],
      ["Envelopes", r.exposure.count], ["Amount", amounts(r.exposure.gross)], ["In closed periods", r.exposure.closed_period],
      ["Canary", r.canary ? `${r.canary.slice.count ?? `${r.canary.slice.percent}%`} first; go on while at most ${r.canary.max_failure_percent}% fail (wait ${r.canary.wait_secs}s)` : "none"],
      ["Decision", r.decision ? `${person(r.decision.by)} at ${when(r.decision.at)}: ${r.decision.reason}` : "—"],
      ["Execution", r.execution ? `${r.execution.summary || ""} ${r.execution.finished_at ? `finished ${when(r.execution.finished_at)}` : ""}` : "—"],
    ]),
    r.edit ? h("div", { class: "diff", id: "diff" }, h("h2", {}, "Edit: field by field"),
      table(["Field", "Before", "After"], r.edit.diff.map((d) => [d.field, h("del", {}, d.before ?? "(absent)"), h("ins", {}, d.after ?? "(absent)")]))) : "",
    actions.length ? h("div", { class: "actions" }, actions) : "",
    progress,
    h("h2", {}, "The exact set"),
    table(["Envelope", "Would be", "Amount", "Entity", "Period", ""], set),
    h("h2", {}, "Its dry run"), h("pre", {}, r.dry_run),
  );
}

/// The audit trail verified by the control plane (the auditor's): whole, or from a seal.
function auditVerification(q) {
  const from = h("input", { id: "from-seal", name: "from_seal", type: "number", min: 1, size: 6, value: q.get("from_seal") || "" });
  const out = h("div", { id: "audit" });
  const form = h("form", { class: "actions", onsubmit: async (ev) => {
    ev.preventDefault();
    const button = ev.submitter;
    const asked = { operation: "verify-audit" };
    if (from.value) asked.from_seal = Number(from.value);
    const r = await attempt(asked, button);
    if (!r) return;
    if (r.latest_seal_seq) from.value = r.latest_seal_seq;
    const verdict = r.intact ? "INTACT" : "BROKEN";
    out.replaceChildren(
      h("h2", {}, r.from_seal ? `From seal ${r.from_seal}: ` : "The whole trail: ", h("span", { id: "audit-verdict", class: `badge ${verdict}` }, verdict)),
      fields([
        ["Records", r.records], ["Seals", r.seals], ["Newest seal", r.latest_seal ? `${r.latest_seal_seq}: ${r.latest_seal}` : "none yet"],
        ["Not yet sealed", (r.unsealed || []).map((u) => `${u.chain} ${u.from_seq}–${u.to_seq}`).join(", ") || "nothing"],
        ["Read from the bucket alone", r.from_bucket ? "yes" : "no"],
      ]),
      ...(r.breaks?.length ? [h("h2", {}, "Breaks"), h("ul", {}, r.breaks.map((b) => h("li", {}, b)))] : []),
      h("p", { class: "muted" }, r.latest_seal_seq ? `Next time, verify from seal ${r.latest_seal_seq}: what came after it.` : ""));
  } },
    h("label", {}, "From seal (empty: the whole trail)", from), h("button", { type: "submit", id: "verify-audit" }, "Verify the audit trail"));
  return [h("h1", {}, "Evidence: the audit trail"),
    h("p", { class: "muted" }, "Every record's hash and link, every seal in the Object Lock bucket and the records beside it, as `dlqctl audit verify` checks them. The evidence bundle of a period is exported under its reconciliation, and verifies offline without this code."),
    form, out];
}

/// The period's evidence bundle kept in the bucket by the control plane (the auditor's), and
/// an address to download it from.
function bundleExport(period) {
  const out = h("div", { id: "bundle" });
  const form = h("form", { class: "actions", onsubmit: async (ev) => {
    ev.preventDefault();
    const r = await attempt({ operation: "export-evidence", period }, ev.submitter);
    if (!r) return;
    const file = r.key.split("/").pop();
    out.replaceChildren(
      fields([
        ["Kept in the bucket", `${r.key} (version ${r.version_id})`], ["SHA-256", h("code", { id: "bundle-sha256" }, r.sha256)],
        ["Holds", `${r.transactions} transactions of ${r.period}, ${r.audit_records} audit records in ${r.chains} chains, ${r.seals} seals`],
        ["The period now", h("span", { class: `badge ${r.verdict}` }, r.verdict)],
        ["Download", r.url ? h("a", { id: "bundle-download", href: r.url, download: file, rel: "noopener" }, file) : "no address from this store"],
      ]),
      h("p", { class: "muted" }, `${r.url ? `The address is valid until ${when(r.url_expires_at)}; t` : "T"}he bundle stays in the bucket. Verify it offline: dlqctl audit verify --bundle ${file}, or tools/verify_bundle.py, without this code.`));
  } },
    h("button", { type: "submit", id: "export-evidence" }, `Export the evidence bundle of ${period}`));
  return [h("h2", {}, "Evidence bundle"),
    h("p", { class: "muted" }, "The trail is sealed, and the bundle (the period's transactions and the whole trail up to that seal) is kept in the Object Lock bucket for its retention: each export is a copy no one can delete."),
    form, out];
}

async function evidence(_, q) {
  const period = h("input", { id: "period", name: "period", value: q.get("period") || new Date().toISOString().slice(0, 7), size: 8, pattern: "[0-9]{4}-[0-9]{2}", required: true });
  const form = h("form", { class: "actions", onsubmit: (ev) => { ev.preventDefault(); go("evidence", { period: period.value }); } },
    h("label", {}, "Accounting period (YYYY-MM)", period), h("button", { type: "submit", id: "reconcile" }, "Reconcile"));
  const head = [h("h1", {}, "Evidence: reconcile a period"),
    h("p", { class: "muted" }, "committed + duplicates + pending + quarantined + in flight, by count and by amount per currency: the stores checked against each other (the auditor's). Without the producer's manifest, a transaction no record names is not seen: `dlqctl reconcile --manifest` proves against what was sent. Messages in the queues, the DLQ and parked behind it count as queued: UNDECIDED until settled."), form];
  const audit = may("auditor") ? auditVerification(q) : [];
  if (!q.get("period")) return show(...head, ...audit);
  let r;
  try {
    r = await ask({ operation: "reconcile", period: q.get("period") });
  } catch (e) {
    return show(...head, h("p", { class: "bad" }, e.message), ...audit);
  }
  const named = (title, items) => items?.length ? [h("h2", {}, title), h("ul", {}, items.map((i) => h("li", {}, i)))] : [];
  show(...head,
    h("h2", {}, `${q.get("period")}: `, h("span", { id: "verdict", class: `badge ${r.verdict}` }, r.verdict)),
    r.verdict === "UNDECIDED" ? h("p", { class: "warn" }, `${r.queued} messages still in the main queue, the DLQ or parked behind it: what they become decides.`) : "",
    table(["State", "Count", "Amount"], Object.entries(r.by_state).map(([state, t]) => [state, t.count, amounts(t)]), [1]),
    h("h2", {}, "By entity and period"),
    table(["Entity and period", "States"], Object.entries(r.by_entity_period).map(([ep, c]) => [ep, Object.entries(c).map(([k, n]) => `${k} ${n}`).join(", ")])),
    ...named("Problems", r.problems), ...named("Missing", r.missing), ...named("Extra", r.extra),
    ...named("Edited (as sent → as posted)", r.edited), ...named("Altered", r.altered),
    ...(may("auditor") ? bundleExport(q.get("period")) : []), ...audit);
}

window.addEventListener("hashchange", render);
providerReturn()
  .then((signedIn) => {
    if (signedIn) history.replaceState(null, "", `${location.pathname}#/triage`);
    return render();
  })
  .catch((e) => { notice(e.message, true); render(); });
