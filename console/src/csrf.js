'use strict';
// csrf.js: sessions, the per-session CSRF token, and the Host / Origin checks.
//
// A session is a random id in an HttpOnly, SameSite=Strict cookie.  Its CSRF
// token is HMAC-SHA256(server secret, session id); the secret is drawn at
// start, so tokens die with the process.  Every form carries the token in a
// hidden field; a POST must present the session cookie, the matching token,
// and an Origin (or, without one, a Referer) naming an allowed host.  Every
// request (GET too) must carry an allowed Host header, which defeats DNS
// rebinding: a page of another site cannot read the console through a name
// that resolves to 127.0.0.1.

const crypto = require('crypto');

const COOKIE = 'orch_console_sid';
const SID_RE = /^[A-Za-z0-9_-]{43}$/;
const secret = crypto.randomBytes(32);

function parseCookies(header) {
  const out = {};
  for (const part of String(header || '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) out[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  return out;
}

// session(req, res): the request's session id, issuing a new cookie when it
// has none (or a malformed one).
function session(req, res) {
  const sid = parseCookies(req.headers.cookie)[COOKIE];
  if (sid && SID_RE.test(sid)) return { sid, fresh: false };
  const fresh = crypto.randomBytes(32).toString('base64url');
  res.setHeader('Set-Cookie', `${COOKIE}=${fresh}; Path=/; HttpOnly; SameSite=Strict`);
  return { sid: fresh, fresh: true };
}

function token(sid) {
  return crypto.createHmac('sha256', secret).update(sid).digest('base64url');
}

function tokenValid(sid, given) {
  if (typeof given !== 'string' || !sid) return false;
  const want = Buffer.from(token(sid));
  const got = Buffer.from(given);
  return got.length === want.length && crypto.timingSafeEqual(got, want);
}

// allowedHosts(cfg): the Host header values this console answers to.
function allowedHosts(cfg) {
  const p = cfg.port;
  const set = new Set([`127.0.0.1:${p}`, `localhost:${p}`, `[::1]:${p}`]);
  const h = cfg.host.includes(':') && !cfg.host.startsWith('[') ? `[${cfg.host}]` : cfg.host;
  if (h !== '0.0.0.0' && h !== '[::]') set.add(`${h}:${p}`);
  for (const extra of cfg.allowedHosts) set.add(extra.toLowerCase());
  return set;
}

function hostAllowed(req, hosts) {
  const host = String(req.headers.host || '').toLowerCase();
  return hosts.has(host);
}

// originAllowed(req, hosts): the Origin header (or the Referer's origin when
// there is no Origin) must be http(s)://<an allowed host>.
function originAllowed(req, hosts) {
  let origin = req.headers.origin;
  if (!origin || origin === 'null') {
    if (origin === 'null') return false;
    const ref = req.headers.referer;
    if (!ref) return false;
    try { origin = new URL(ref).origin; } catch { return false; }
  }
  let u;
  try { u = new URL(origin); } catch { return false; }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return false;
  const port = u.port || (u.protocol === 'https:' ? '443' : '80');
  return hosts.has(`${u.hostname}:${port}`.toLowerCase());
}

// checkPost(req, sid, form, hosts): null when the POST may proceed, else the
// reason it is refused.
function checkPost(req, sess, form, hosts) {
  if (!originAllowed(req, hosts)) return 'the request does not come from this console (Origin / Referer check)';
  if (sess.fresh) return 'no session cookie: reload the page and try again';
  if (!tokenValid(sess.sid, form.csrf)) return 'missing or wrong CSRF token: reload the page and try again';
  return null;
}

module.exports = { session, token, tokenValid, allowedHosts, hostAllowed, originAllowed, checkPost, COOKIE };
