// Sign-in for a relay in the JWT auth mode (HTTP_API.md, "Identity"): the OpenID Connect authorization code flow
// with PKCE, through the vendored oauth4webapi, against the issuer GET /auth/config names.
//
// The tokens live in sessionStorage (this tab only, gone when it closes; never localStorage), with the PKCE
// verifier, state and nonce of a sign-in under way, which must outlive the redirect to the issuer and back.
// window.ChatAuth is what app.js uses:
//   ChatAuth.ready            resolves once the configuration is read and a returning sign-in is finished
//   ChatAuth.fetch(url, init) fetch() with Authorization: Bearer <token>; a 401 renews the token (its refresh
//                             token) and sends the request once more: a stream's resume never loses the reply to an
//                             expired token. Without a refresh token, a 401 to a page that was signed in starts a
//                             new sign-in, which comes back to the same #session (the page then follows the reply)
//   ChatAuth.signIn(), .signOut(), .user() (a name to show), .owner() ("<iss>#<sub>": who the relay takes the
//                             user for, to keep each user's own things apart), .mode()
// Under AWS_IAM or NONE (or a relay without /auth/config) it adds nothing: ChatAuth.fetch is fetch.
import * as oauth from "./vendor/oauth4webapi.js";

const STORE = "chatstream.auth"; // the tokens: {access_token, refresh_token, expires_at, user, owner}
const PENDING = "chatstream.auth.pending"; // a sign-in under way: {verifier, state, nonce, hash}
const SIGNED_OUT = "chatstream.auth.signed-out"; // after a sign-out, the next sign-in asks for the user again
const RENEW_BEFORE_MS = 30_000; // renew a token this close to its expiry before sending it

export function createAuth({ storage, location, history, fetchImpl, now = () => Date.now(), lib = oauth }) {
  let config = { auth_type: "NONE" };
  let server = null; // oauth4webapi's AuthorizationServer
  let client = null;
  let renewing = null; // one renewal at a time, shared by the requests that wait for it
  const listeners = new Set();

  const read = (key) => {
    try {
      return JSON.parse(storage.getItem(key) || "null");
    } catch {
      return null;
    }
  };
  const write = (key, value) => (value === null ? storage.removeItem(key) : storage.setItem(key, JSON.stringify(value)));
  const changed = () => listeners.forEach((listener) => listener(auth.user()));
  const redirectUri = () => `${location.origin}/`;
  // The local stack's issuer is plain http on loopback: oauth4webapi refuses http unless told.
  const options = () => ({
    [lib.customFetch]: fetchImpl,
    ...(new URL(config.token_endpoint).protocol === "http:" ? { [lib.allowInsecureRequests]: true } : {}),
  });

  async function load() {
    let response;
    try {
      response = await fetchImpl("/auth/config", { headers: { Accept: "application/json" }, cache: "no-store" });
    } catch {
      return; // the page works as before; its requests say what is wrong
    }
    if (!response.ok) return; // 404: a relay without sign-in
    config = await response.json();
    if (config.auth_type !== "JWT") return;
    server = {
      issuer: config.issuer,
      authorization_endpoint: config.authorization_endpoint,
      token_endpoint: config.token_endpoint,
      end_session_endpoint: config.end_session_endpoint || undefined,
    };
    client = { client_id: config.client_id };
    const params = new URLSearchParams(location.search);
    if (params.has("code") || params.has("error")) await finishSignIn();
  }

  async function finishSignIn() {
    const pending = read(PENDING);
    write(PENDING, null);
    const returned = new URL(location.href);
    history.replaceState(null, "", `${location.pathname}${pending?.hash || ""}`); // no code left in the URL
    if (!pending) return;
    const params = lib.validateAuthResponse(server, client, returned, pending.state);
    const response = await lib.authorizationCodeGrantRequest(
      server,
      client,
      lib.None(),
      params,
      redirectUri(),
      pending.verifier,
      options(),
    );
    const result = await lib.processAuthorizationCodeResponse(server, client, response, {
      expectedNonce: pending.nonce,
      requireIdToken: true,
    });
    const claims = lib.getValidatedIdTokenClaims(result);
    keep(result, displayName(claims), `${claims.iss}#${claims.sub}`);
    write(SIGNED_OUT, null);
  }

  function keep(result, user, owner) {
    const previous = read(STORE);
    write(STORE, {
      access_token: result.access_token,
      refresh_token: result.refresh_token || previous?.refresh_token || null,
      expires_at: result.expires_in ? now() + result.expires_in * 1000 : null,
      user: user || previous?.user || "",
      owner: owner || previous?.owner || "",
    });
    changed();
  }

  async function renew() {
    const tokens = read(STORE);
    if (!tokens?.refresh_token) return false;
    renewing ||= (async () => {
      try {
        const response = await lib.refreshTokenGrantRequest(server, client, lib.None(), tokens.refresh_token, options());
        keep(await lib.processRefreshTokenResponse(server, client, response));
        return true;
      } catch {
        return false;
      } finally {
        renewing = null;
      }
    })();
    return renewing;
  }

  const auth = {
    ready: null,
    mode: () => config.auth_type,
    user: () => (config.auth_type === "JWT" ? read(STORE)?.user ?? null : null),
    owner: () => (config.auth_type === "JWT" ? read(STORE)?.owner || null : null),
    onChange: (listener) => listeners.add(listener),

    async signIn() {
      if (config.auth_type !== "JWT") return;
      const verifier = lib.generateRandomCodeVerifier();
      const pending = { verifier, state: lib.generateRandomState(), nonce: lib.generateRandomNonce(), hash: location.hash };
      write(PENDING, pending);
      const url = new URL(config.authorization_endpoint);
      url.search = new URLSearchParams({
        response_type: "code",
        client_id: config.client_id,
        redirect_uri: redirectUri(),
        scope: config.scope,
        state: pending.state,
        nonce: pending.nonce,
        code_challenge: await lib.calculatePKCECodeChallenge(verifier),
        code_challenge_method: "S256",
        ...(read(SIGNED_OUT) ? { prompt: "login" } : {}),
      }).toString();
      location.assign(url.href);
    },

    signOut() {
      write(STORE, null);
      write(SIGNED_OUT, true);
      changed();
    },

    headers() {
      const token = config.auth_type === "JWT" ? read(STORE)?.access_token : null;
      return token ? { Authorization: `Bearer ${token}` } : {};
    },

    async fetch(url, init = {}) {
      if (config.auth_type !== "JWT") return fetchImpl(url, init);
      const tokens = read(STORE);
      if (tokens?.expires_at && tokens.expires_at - now() < RENEW_BEFORE_MS) await renew();
      const send = () => fetchImpl(url, { ...init, headers: { ...(init.headers || {}), ...auth.headers() } });
      const response = await send();
      if (response.status !== 401 || !read(STORE)) return response; // never signed in: the 401 says to sign in
      if (await renew()) return send();
      write(STORE, null);
      changed();
      await auth.signIn(); // the token is gone for good: sign in again, back to this #session
      return response;
    },
  };
  auth.ready = load().then(changed, (error) => {
    write(STORE, null);
    changed();
    console.warn("sign-in failed", error);
  });
  return auth;
}

function displayName(claims) {
  return claims?.email || claims?.preferred_username || claims?.["cognito:username"] || claims?.name || claims?.sub || "";
}

if (typeof window !== "undefined" && window.sessionStorage) {
  window.ChatAuth = createAuth({
    storage: window.sessionStorage,
    location: window.location,
    history: window.history,
    fetchImpl: window.fetch.bind(window),
  });
}
