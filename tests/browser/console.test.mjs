// The operator console end to end, in Debian's Chromium (playwright-core drives the installed
// browser; nothing downloads one), against the local stack: `dlqctl console` on a stack prefix
// of this run's own, dead letters made by the real consumer and enricher (`xtask pump`).
//
// What it shows: a maker triages, selects the XAU group and proposes a replay (a dry run first);
// the same person's approval, as an approver, is refused by the control plane; another approver
// approves with a canary, and the run's progress reaches EXECUTED; an edit shows its field diff
// and, approved and run, posts once, its page showing its WORM copy, its audit records and its
// copy posted; the auditor reconciles, verifies the trail and exports the period's bundle, which
// downloads from the link and verifies offline; a viewer sees no action and the control plane refuses the
// viewer's crafted requests; a controller signs in through an OpenID Connect provider (a small
// one of the test's own, `provider.mjs`) as on AWS, and forged, foreign and expired tokens are
// refused. Screenshots of each step go to $OUT (default target/console-e2e).
//
// Run by `make test` (tests/browser/run.sh), which installs Chromium and playwright-core.

import { chromium } from "playwright-core";
import { execFile, spawn } from "node:child_process";
import { createHash, generateKeyPairSync } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import path from "node:path";
import assert from "node:assert/strict";
import { jwt, startProvider } from "./provider.mjs";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const DLQCTL = process.env.DLQCTL || path.join(root, "target/debug/dlqctl");
const XTASK = process.env.XTASK || path.join(root, "target/debug/xtask");
const OUT = process.env.OUT || path.join(root, "target/console-e2e");
const PREFIX = `con-e2e-${Date.now().toString(36)}`;
mkdirSync(OUT, { recursive: true });

let step = 0;
function say(text) {
  step += 1;
  console.log(`[console-e2e] ${step}. ${text}`);
}

async function cli(bin, args) {
  try {
    const { stdout } = await run(bin, args, { env: { ...process.env, DLQ_STACK_PREFIX: PREFIX }, maxBuffer: 1 << 24 });
    return stdout;
  } catch (e) {
    throw new Error(`${path.basename(bin)} ${args.join(" ")} failed: ${e.stderr || e.message}`);
  }
}

const pump = (queue = "all") => cli(XTASK, ["pump", "--queue", queue, "--max-secs", "120"]);

// ---- The state: dead letters from the real pipeline -------------------------------------------

say(`set up stack prefix ${PREFIX}`);
await cli(XTASK, ["setup"]);
const bodies = [];
for (let i = 1; i <= 6; i++) {
  bodies.push({ schema_version: 1, message_id: `m-xau-${i}`, ledger_entity: i % 2 ? "ACME-UK" : "ACME-US", currency: "XAU", amount: `${i}.0625`, match_decision: "MATCHED", trace_id: `t-xau-${i}`, value_date: "2026-12-01", external_ref: `BANK-XAU-${i}`, counterparty: "Bullion <b>Ltd</b>" });
}
for (let i = 1; i <= 3; i++) {
  bodies.push({ schema_version: 1, message_id: `m-xpd-${i}`, ledger_entity: "ACME-DE", currency: "XPD", amount: `7.${i}`, match_decision: "MATCHED", trace_id: `t-xpd-${i}`, value_date: "2026-12-03", external_ref: `BANK-XPD-${i}`, counterparty: "Metals Desk" });
}
for (let i = 1; i <= 2; i++) {
  bodies.push({ schema_version: 1, message_id: `m-xpt-${i}`, ledger_entity: "ACME-US", currency: "XPT", amount: `12.5${i}`, match_decision: "MATCHED", trace_id: `t-xpt-${i}`, value_date: "2026-12-02", external_ref: `BANK-XPT-${i}`, counterparty: "Globex" });
}
const file = path.join(OUT, "messages.jsonl");
writeFileSync(file, bodies.map((b) => JSON.stringify(b)).join("\n") + "\n");
await cli(DLQCTL, ["send", "--fill-hash", file]);
await pump();
await cli(DLQCTL, ["--as", "admin:ada", "ref", "currency", "add", "XAU", "--minor-units", "4"]);
await cli(DLQCTL, ["--as", "admin:ada", "policy", "set", "--max-count", "1"]);

// ---- The console --------------------------------------------------------------------------------

/// The address a `dlqctl console` it started says it listens on.
function listening(server) {
  return new Promise((resolve, reject) => {
    let seen = "";
    server.stdout.on("data", (d) => {
      seen += d;
      const m = seen.match(/http:\/\/127\.0\.0\.1:\d+\/console\//);
      if (m) resolve(m[0]);
    });
    server.on("exit", (code) => reject(new Error(`dlqctl console exited (${code}) before listening`)));
  });
}

const server = spawn(DLQCTL, ["console", "--port", "0"], { env: { ...process.env, DLQ_STACK_PREFIX: PREFIX }, stdio: ["ignore", "pipe", "inherit"] });
const base = await listening(server);
say(`console at ${base}`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const errors = [];

/// A page signed in as `person` in `role`, in a browser context of its own (its own sign-in).
async function signedIn(person, role) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(`${person}: ${e.message}`));
  page.on("console", (m) => m.type() === "error" && !m.text().includes("status of 40") && errors.push(`${person}: ${m.text()}`));
  await page.goto(base);
  await page.fill("#person", person);
  await page.selectOption("#role", role);
  await page.click("button[type=submit]");
  await page.waitForSelector("#signed-in");
  assert.equal(await page.textContent("#signed-in"), `${person} · ${role}`);
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

const xauRow = (page) => page.locator("tr", { hasText: "UNMAPPED_CURRENCY:XAU" });
const badge = (page) => page.locator("h1 .badge");
// A link to one envelope (the envelopes view's), never the triage view's links to a group, which
// the envelopes view replaces as it renders.
const ENVELOPE_LINK = 'tbody a[href^="#/envelope/"]';

try {
  // 1. The maker triages and proposes the XAU group's replay: a dry run first.
  say("a maker triages and proposes the XAU group's replay");
  const alice = await signedIn("alice", "maker");
  await xauRow(alice).waitFor();
  assert.match(await xauRow(alice).textContent(), /6.*21\.375 XAU/);
  await shot(alice, "01-triage");
  // The verbatim body is text: the counterparty's `<b>` shows as written, no element made of it.
  await alice.goto(`${base}#/envelopes?root_cause=${encodeURIComponent("UNMAPPED_CURRENCY:XAU")}`);
  await alice.locator(ENVELOPE_LINK).first().click();
  await alice.locator("#body").waitFor();
  assert.match(await alice.textContent("#body"), /"counterparty":"Bullion <b>Ltd<\/b>"/);
  assert.equal(await alice.locator("#body b, main b").count(), 0, "markup from a body rendered as HTML");
  await alice.goto(`${base}#/triage`);
  await xauRow(alice).waitFor();
  await xauRow(alice).getByRole("button", { name: "Propose replay" }).click();
  await alice.fill("#reason", "XAU mapped to 4 minor units (ticket FIN-42)");
  await alice.click("#dry");
  await alice.locator("#dry-run table").first().waitFor();
  const dry = await alice.textContent("#dry-run");
  assert.match(dry, /Needs a second person/);
  assert.equal((dry.match(/WOULD_REINJECT/g) || []).length, 6, dry);
  await shot(alice, "02-dry-run");
  await alice.fill("#canary", "1");
  await alice.click("#submit");
  await alice.waitForURL(/#\/request\//);
  await badge(alice).waitFor();
  assert.equal(await badge(alice).textContent(), "PENDING_APPROVAL");
  assert.equal(await alice.locator("#approve").count(), 0, "a maker has no approve button");
  assert.match(await alice.textContent("main dl"), /Canary1 first; go on while at most 0% fail/);
  const requestUrl = alice.url();
  await shot(alice, "03-request");

  // 2. The same person as an approver: the control plane refuses her approval.
  say("the maker's own approval, as an approver, is refused by the control plane");
  const aliceApprover = await signedIn("alice", "approver");
  await aliceApprover.goto(requestUrl);
  await aliceApprover.locator("#approve").waitFor();
  await aliceApprover.fill("#decision-reason", "looks fine");
  await aliceApprover.click("#approve");
  await aliceApprover.locator("#notice .bad", { hasText: "self-approval" }).waitFor();
  await aliceApprover.reload();
  await aliceApprover.locator("#approve").waitFor();
  assert.equal(await badge(aliceApprover).textContent(), "PENDING_APPROVAL");
  assert.match(await aliceApprover.textContent("main dl"), /Decision—/);
  await shot(aliceApprover, "04-self-approval-refused");

  // 3. Another approver approves; the run (a canary of one first) goes to its end, the consumer
  // taking the re-injected copies meanwhile.
  say("another approver approves; the canary and the rest run to EXECUTED");
  const bob = await signedIn("bob", "approver");
  await bob.goto(requestUrl);
  await bob.locator("#approve").waitFor();
  await bob.fill("#decision-reason", "checked the set against FIN-42");
  await bob.click("#approve");
  await bob.locator("#execute").waitFor();
  assert.equal(await badge(bob).textContent(), "APPROVED");
  let executing = true;
  const consumer = (async () => {
    while (executing) await pump("main");
  })();
  await bob.click("#execute");
  await bob.locator("#progress h2", { hasText: "Result" }).waitFor({ timeout: 120_000 });
  executing = false;
  await consumer;
  assert.equal(await bob.textContent("#progress h2 .badge"), "EXECUTED");
  // The canary's slice went first and its copy was committed before the rest went on.
  assert.match(await bob.textContent("#canary-result"), /a slice of 1: 1 committed, 0 dead-lettered, 0 unknown .* passed/);
  await shot(bob, "05-executed");
  await pump();

  // 4. The XAU group is gone from triage; the XPT one is edited: its diff, approved, posted once.
  say("an edit shows its diff and, approved and run, posts once: the period reconciles at the console");
  await alice.goto(`${base}#/triage`);
  await alice.locator("tr", { hasText: "UNMAPPED_CURRENCY:XPT" }).waitFor();
  assert.equal(await xauRow(alice).count(), 0);
  await alice.goto(`${base}#/envelopes?root_cause=${encodeURIComponent("UNMAPPED_CURRENCY:XPT")}`);
  await alice.locator(ENVELOPE_LINK).first().click();
  await alice.locator("#edit").waitFor();
  await alice.fill("#edit input[name=currency]", "USD");
  await alice.fill("#edit input[name=reason]", "XPT was a typo for USD (FIN-43)");
  await alice.click("#edit button[type=submit]");
  await alice.waitForURL(/#\/request\//);
  await alice.locator("#diff").waitFor();
  const diff = await alice.textContent("#diff");
  assert.match(diff, /currency.*XPT.*USD/s);
  await shot(alice, "06-edit-diff");
  const editUrl = alice.url();
  await bob.goto(editUrl);
  await bob.fill("#decision-reason", "USD confirmed with the bank statement");
  await bob.click("#approve");
  await bob.locator("#execute").waitFor();
  await bob.click("#execute");
  await bob.locator("#progress h2", { hasText: "Result" }).waitFor({ timeout: 60_000 });
  assert.equal(await bob.textContent("#progress h2 .badge"), "EXECUTED");
  await pump();
  const edited = await bob.evaluate(async (url) => {
    const id = url.split("#/request/")[1];
    const ask = (body) => fetch("operations", { method: "POST", headers: { authorization: `Bearer ${sessionStorage.getItem("token")}` }, body: JSON.stringify(body) }).then((r) => r.json());
    const request = await ask({ operation: "request", request_id: id });
    return ask({ operation: "envelope", envelope_id: request.edit.envelope_id });
  }, editUrl);
  // Superseded by its edited copy, posted once: the period reconciles (a second posting of
  // either transaction would be a problem it names).
  assert.equal(edited.envelope.status, "SUPERSEDED", JSON.stringify(edited.envelope.status_history));
  const copies = edited.envelope.replays.filter((r) => r.copy_source_hash);
  assert.equal(copies.length, 1, JSON.stringify(edited.envelope.replays));
  // Its page: the WORM copy's first version as written, the audit records of its dead letter,
  // its envelope and its edit, and the edited copy posted (the ledger's posting is the copy's).
  await bob.goto(`${base}#/envelope/${encodeURIComponent(edited.envelope.envelope_id)}`);
  await bob.locator("#worm-verdict").waitFor();
  assert.equal(await bob.textContent("#worm-verdict"), "MATCHES");
  const records = await bob.textContent("#records");
  for (const kind of ["DEAD_LETTERED", "ENRICHED", "EDITED"]) assert.match(records, new RegExp(kind), records);
  assert.deepEqual(await bob.locator("#copies tbody td:nth-child(3)").allTextContents(), ["POSTED"]);
  await shot(bob, "11-envelope-lineage");
  // The auditor reconciles the period at the console: it holds, the edit named.
  const audrey = await signedIn("audrey", "auditor");
  await audrey.goto(`${base}#/evidence`);
  await audrey.fill("#period", "2026-12");
  await audrey.keyboard.press("Enter");
  await audrey.locator("#verdict").waitFor();
  assert.equal(await audrey.textContent("#verdict"), "HOLDS");
  assert.match(await audrey.textContent("main"), /Edited.*12\.51 XPT as sent -> 12\.51 USD as posted/s);
  await shot(audrey, "08-reconcile");
  // And as `dlqctl reconcile` says it, read by the auditor's own role from the stores.
  const reconciled = JSON.parse(await cli(DLQCTL, ["--as", "auditor:audrey", "--json", "reconcile", "--period", "2026-12"]));
  assert.equal(reconciled.verdict, "HOLDS", JSON.stringify(reconciled));
  assert.deepEqual([reconciled.by_state.COMMITTED.count, reconciled.by_state.PENDING.count], [7, 4]);
  assert.equal(reconciled.edited.length, 1, JSON.stringify(reconciled.edited));
  // The auditor verifies the audit trail at the console: whole, then from the newest seal.
  await cli(DLQCTL, ["--as", "auditor:audrey", "audit", "seal"]);
  await audrey.click("#verify-audit");
  await audrey.locator("#audit-verdict").waitFor();
  assert.equal(await audrey.textContent("#audit-verdict"), "INTACT");
  assert.notEqual(await audrey.inputValue("#from-seal"), "", "the newest seal's number, for next time");
  await audrey.click("#verify-audit");
  await audrey.locator("#audit h2", { hasText: "From seal" }).waitFor();
  assert.equal(await audrey.textContent("#audit-verdict"), "INTACT");
  await shot(audrey, "10-audit-verified");
  // The period's evidence bundle, exported at the console into the bucket: downloaded from the
  // address it gives, its SHA-256 the one shown, and it verifies offline.
  await audrey.click("#export-evidence");
  await audrey.locator("#bundle-download").waitFor();
  const href = await audrey.getAttribute("#bundle-download", "href");
  const download = await fetch(href);
  assert.equal(download.status, 200, href);
  // The address is signed: another version, or a changed signature, is refused.
  const signature = new URL(href).searchParams.get("X-Amz-Signature");
  const forged = href.replace(signature, [...signature].reverse().join(""));
  assert.equal((await fetch(forged)).status, 403, forged);
  const bundleBytes = Buffer.from(await download.arrayBuffer());
  assert.equal(createHash("sha256").update(bundleBytes).digest("hex"), await audrey.textContent("#bundle-sha256"));
  const bundleFile = path.join(OUT, "bundle-2026-12.json");
  writeFileSync(bundleFile, bundleBytes);
  const offline = JSON.parse(await cli(DLQCTL, ["--json", "audit", "verify", "--bundle", bundleFile]));
  assert.deepEqual(offline.breaks, [], JSON.stringify(offline));
  assert.ok(offline.records > 0, JSON.stringify(offline));
  await shot(audrey, "12-bundle-exported");

  // 5. A viewer: no action to take, even on a request waiting for approval (alice's quarantine
  // of the XPD group), and the control plane refuses what a crafted request asks.
  say("a viewer sees no action, and the control plane refuses the viewer's crafted requests");
  await alice.goto(`${base}#/triage`);
  await alice.locator("tr", { hasText: "UNMAPPED_CURRENCY:XPD" }).getByRole("button", { name: "Quarantine" }).click();
  await alice.fill("#reason", "XPD is booked by the metals desk by hand (FIN-44)");
  await alice.click("#dry");
  await alice.click("#submit");
  await alice.waitForURL(/#\/request\//);
  const pendingUrl = alice.url();
  const vera = await signedIn("vera", "viewer");
  await vera.locator("tr", { hasText: "UNMAPPED_CURRENCY:XPT" }).waitFor();
  assert.equal(await vera.getByRole("button", { name: "Propose replay" }).count(), 0);
  await vera.goto(pendingUrl);
  await badge(vera).waitFor();
  assert.equal(await badge(vera).textContent(), "PENDING_APPROVAL");
  assert.equal(await vera.locator("#approve, #reject, #execute, #withdraw").count(), 0);
  await shot(vera, "07-viewer");
  await vera.goto(`${base}#/envelopes`);
  await vera.locator(ENVELOPE_LINK).first().waitFor();
  assert.equal(await vera.locator("tbody input[type=checkbox]").count(), 0);
  await vera.locator(ENVELOPE_LINK).first().click();
  await vera.locator("#body").waitFor();
  assert.equal(await vera.locator("#edit").count(), 0);
  const crafted = await vera.evaluate(async (requestId) => {
    const ask = (body) => fetch("operations", { method: "POST", headers: { authorization: `Bearer ${sessionStorage.getItem("token")}` }, body: JSON.stringify(body) }).then((r) => r.status);
    return {
      replay: await ask({ operation: "replay", reason: "crafted", root_cause: "UNMAPPED_CURRENCY:*" }),
      approve: await ask({ operation: "approve", request_id: requestId, reason: "crafted" }),
      policy: await ask({ operation: "set-policy", policy: {} }),
      export: await ask({ operation: "export-evidence", period: "2026-12" }),
    };
  }, pendingUrl.split("#/request/")[1]);
  assert.deepEqual(crafted, { replay: 403, approve: 403, policy: 403, export: 403 });

  // 6. Signing in through an identity provider, as on AWS: authorization code with PKCE; the
  // server verifies the provider's token as API Gateway's authorizer does.
  say("a controller signs in through an OpenID Connect provider and acts in a role her groups give");
  const provider = await startProvider();
  const oidcServer = spawn(DLQCTL, ["console", "--port", "0", "--issuer", provider.issuer, "--client-id", "console-e2e"], { env: { ...process.env, DLQ_STACK_PREFIX: PREFIX }, stdio: ["ignore", "pipe", "inherit"] });
  try {
    const oidcBase = await listening(oidcServer);
    provider.next = { email: "olga@example.com", groups: ["approver", "viewer"] };
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const olga = await context.newPage();
    olga.on("pageerror", (e) => errors.push(`olga: ${e.message}`));
    olga.on("console", (m) => m.type() === "error" && !m.text().includes("status of 40") && errors.push(`olga: ${m.text()}`));
    const first = await olga.goto(oidcBase);
    assert.match(first.headers()["content-security-policy"], new RegExp(`connect-src 'self' ${provider.issuer};`));
    await olga.selectOption("#role", "approver");
    await olga.click("#provider-sign-in");
    await olga.waitForSelector("#signed-in");
    assert.equal(await olga.textContent("#signed-in"), "olga@example.com · approver");
    assert.equal(provider.tokens, 1);
    assert.ok(!olga.url().includes("code="), "the code leaves the address once exchanged");
    await olga.locator("tr", { hasText: "UNMAPPED_CURRENCY:XPT" }).waitFor();
    await shot(olga, "09-provider-sign-in");
    // Refused before the control plane: another key's signature, another audience, an expired
    // token; and by the control plane: a role her groups do not give.
    const now = Math.floor(Date.now() / 1000);
    const claims = { iss: provider.issuer, aud: "console-e2e", sub: "sub-mallory", email: "mallory@example.com", email_verified: true, groups: ["admin"], iat: now, exp: now + 600 };
    const { privateKey: otherKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const tokens = {
      forged: jwt(otherKey, provider.kid, claims),
      audience: jwt(provider.privateKey, provider.kid, { ...claims, aud: "another-app" }),
      expired: jwt(provider.privateKey, provider.kid, { ...claims, exp: now - 10 }),
    };
    const statuses = await olga.evaluate(async (tokens) => {
      const ask = (token, role) => fetch("operations", { method: "POST", headers: { authorization: `Bearer ${token}`, ...(role ? { "x-operator-role": role } : {}) }, body: JSON.stringify({ operation: "whoami" }) }).then((r) => r.status);
      const out = {};
      for (const [name, token] of Object.entries(tokens)) out[name] = await ask(token);
      out.role = await ask(sessionStorage.getItem("token"), "admin");
      return out;
    }, tokens);
    assert.deepEqual(statuses, { forged: 401, audience: 401, expired: 401, role: 403 });
    await context.close();
  } finally {
    oidcServer.kill();
    provider.close();
  }

  assert.deepEqual(errors, [], "no script error on any page");
  say(`passed; screenshots in ${OUT}`);
} finally {
  await browser.close();
  server.kill();
}
