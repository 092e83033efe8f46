// The page's sign-in (static/auth.js) against the local issuer, without a browser: the relay is faked (its
// /auth/config, and an API that answers 401 to an expired token), the issuer is real (ISSUER_URL), and the
// "browser" is a storage, a location and a fetch. Prints one JSON line of what it saw; the pytest beside checks it.
import assert from "node:assert/strict";
import { createAuth } from "../../../layers/chatstream/chatstream/relay/static/auth.js";

const ISSUER = process.env.ISSUER_URL;
const PAGE = "http://127.0.0.1:3999";
const storage = new Map();
const store = { getItem: (k) => storage.get(k) ?? null, setItem: (k, v) => storage.set(k, v), removeItem: (k) => storage.delete(k) };
const history = { replaceState: (_s, _t, url) => Object.assign(location, pageAt(url)) };
const seen = [];
let relayRefusesFirst = 0;

function pageAt(path) {
  const url = new URL(path, PAGE);
  return { href: url.href, origin: url.origin, pathname: url.pathname, search: url.search, hash: url.hash, assign: (to) => (location.assigned = to) };
}
let location = pageAt("/#session=abc");

async function fetchImpl(url, init = {}) {
  const target = new URL(url, PAGE);
  if (target.origin !== PAGE) return fetch(target, init); // the issuer: real
  if (target.pathname === "/auth/config") {
    const discovery = await (await fetch(`${ISSUER}/.well-known/openid-configuration`)).json();
    return Response.json({
      auth_type: "JWT", issuer: ISSUER, client_id: "chatstream-page", scope: "openid profile email",
      authorization_endpoint: discovery.authorization_endpoint, token_endpoint: discovery.token_endpoint, end_session_endpoint: null,
    });
  }
  const authorization = new Headers(init.headers).get("authorization");
  seen.push(authorization);
  if (relayRefusesFirst > 0) {
    relayRefusesFirst--;
    return new Response("{}", { status: 401 });
  }
  return Response.json({ ok: true });
}

const page = () => createAuth({ storage: store, location, history, fetchImpl });

// A signed-out page: no token is sent, and a 401 does not start a sign-in by itself.
let auth = page();
await auth.ready;
assert.equal(auth.mode(), "JWT");
assert.equal(auth.user(), null);
relayRefusesFirst = 1;
assert.equal((await auth.fetch("/sessions/abc")).status, 401);
assert.equal(seen.at(-1), null);
assert.equal(location.assigned, undefined);

// Sign in: the authorization request carries PKCE S256, state and nonce, and comes back to this page.
await auth.signIn();
const authorize = new URL(location.assigned);
assert.equal(authorize.searchParams.get("code_challenge_method"), "S256");
assert.equal(authorize.searchParams.get("redirect_uri"), `${PAGE}/`);
assert.ok(!authorize.searchParams.has("prompt"));
// The user names themselves on the issuer's form; the issuer redirects back with a code.
const form = new URLSearchParams(authorize.search);
form.set("username", "alice");
const approved = await fetch(`${ISSUER}/authorize`, { method: "POST", body: form, redirect: "manual" });
location = pageAt(new URL(approved.headers.get("location")).pathname + new URL(approved.headers.get("location")).search);
auth = page(); // the page loads again, at the redirect
await auth.ready;
assert.equal(auth.user(), "alice");
assert.equal(location.search, "", "the code is gone from the URL");
assert.equal(location.hash, "#session=abc", "back in the conversation the sign-in left");
const firstToken = auth.headers().Authorization;
assert.match(firstToken, /^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);

// A request answered 401 (the token expired) is sent again once, with a renewed token: a resume is not lost.
relayRefusesFirst = 1;
const resumed = await auth.fetch("/sessions/abc/turns/1/events", { headers: { "Last-Event-ID": "7" } });
assert.equal(resumed.status, 200);
assert.equal(seen.at(-2), firstToken);
assert.notEqual(seen.at(-1), firstToken);
assert.match(seen.at(-1), /^Bearer /);

// Sign out: no token is sent, and the next sign-in asks for the user again.
auth.signOut();
assert.equal(auth.user(), null);
assert.deepEqual(auth.headers(), {});
await auth.signIn();
assert.equal(new URL(location.assigned).searchParams.get("prompt"), "login");
for (const key of storage.keys()) assert.ok(key.startsWith("chatstream.auth"), key);
console.log(JSON.stringify({ ok: true, requests: seen.length }));
