// A small OpenID Connect provider for the console's sign-in test: discovery, keys, an
// authorization endpoint that signs in whoever the test names next (no form), and a token
// endpoint that checks the code, its client, redirect URI and PKCE verifier and answers an ID
// token signed RS256. Cross-origin requests are allowed, as a real provider allows the console's.

import { createServer } from "node:http";
import { createHash, generateKeyPairSync, randomBytes, sign } from "node:crypto";

const b64url = (buf) => Buffer.from(buf).toString("base64url");

export function jwt(privateKey, kid, claims) {
  const head = b64url(JSON.stringify({ alg: "RS256", typ: "JWT", kid }));
  const body = b64url(JSON.stringify(claims));
  const signature = sign("sha256", Buffer.from(`${head}.${body}`), privateKey);
  return `${head}.${body}.${b64url(signature)}`;
}

export async function startProvider() {
  const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const kid = "k1";
  const codes = new Map();
  const provider = { next: null, issuer: "", privateKey, kid, tokens: 0 };
  const server = createServer((req, res) => {
    const url = new URL(req.url, provider.issuer);
    const send = (status, body, headers = {}) => {
      res.writeHead(status, { "access-control-allow-origin": "*", "content-type": "application/json", ...headers });
      res.end(typeof body === "string" ? body : JSON.stringify(body));
    };
    if (req.method === "OPTIONS") return send(204, "", { "access-control-allow-headers": "content-type", "access-control-allow-methods": "GET, POST" });
    if (url.pathname === "/.well-known/openid-configuration") {
      return send(200, { issuer: provider.issuer, authorization_endpoint: `${provider.issuer}/authorize`, token_endpoint: `${provider.issuer}/token`, jwks_uri: `${provider.issuer}/keys`, response_types_supported: ["code"], code_challenge_methods_supported: ["S256"] });
    }
    if (url.pathname === "/keys") return send(200, { keys: [{ ...publicKey.export({ format: "jwk" }), kid, use: "sig", alg: "RS256" }] });
    if (url.pathname === "/authorize") {
      const q = url.searchParams;
      if (q.get("response_type") !== "code" || q.get("code_challenge_method") !== "S256" || !q.get("code_challenge") || !provider.next) {
        return send(400, { error: "invalid_request" });
      }
      const code = b64url(randomBytes(16));
      codes.set(code, { user: provider.next, client_id: q.get("client_id"), redirect_uri: q.get("redirect_uri"), challenge: q.get("code_challenge") });
      const back = new URL(q.get("redirect_uri"));
      back.searchParams.set("code", code);
      back.searchParams.set("state", q.get("state"));
      return send(302, "", { location: back.toString() });
    }
    if (url.pathname === "/token" && req.method === "POST") {
      let text = "";
      req.on("data", (d) => (text += d));
      req.on("end", () => {
        const form = new URLSearchParams(text);
        const grant = codes.get(form.get("code"));
        codes.delete(form.get("code"));
        const verified = grant
          && form.get("grant_type") === "authorization_code"
          && form.get("client_id") === grant.client_id
          && form.get("redirect_uri") === grant.redirect_uri
          && b64url(createHash("sha256").update(form.get("code_verifier") || "").digest()) === grant.challenge;
        if (!verified) return send(400, { error: "invalid_grant" });
        const now = Math.floor(Date.now() / 1000);
        provider.tokens += 1;
        const id_token = jwt(privateKey, kid, { iss: provider.issuer, aud: grant.client_id, sub: `sub-${grant.user.email}`, email: grant.user.email, email_verified: true, groups: grant.user.groups, iat: now, exp: now + 3600 });
        return send(200, { id_token, token_type: "Bearer", expires_in: 3600 });
      });
      return;
    }
    send(404, { error: "not_found" });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  provider.issuer = `http://127.0.0.1:${server.address().port}`;
  provider.close = () => server.close();
  return provider;
}
