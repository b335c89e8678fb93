'use strict';
// html.js: HTML templating that escapes by default.
//
// html`<p>${value}</p>` escapes every interpolated value (payloads, error
// messages, names: all of it may be attacker-controlled); only fragments
// built by html`` itself (or wrapped with raw()) are inserted as they are.
// Arrays are joined; null, undefined and false render as nothing.

class Safe {
  constructor(s) { this.s = s; }
  toString() { return this.s; }
}

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

function escape(value) {
  return String(value).replace(/[&<>"'`]/g, (c) => ESC[c]);
}

function render(v) {
  if (v === null || v === undefined || v === false) return '';
  if (v instanceof Safe) return v.s;
  if (Array.isArray(v)) return v.map(render).join('');
  return escape(v);
}

function html(strings, ...values) {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new Safe(out);
}

// raw(s): trusted markup, inserted unescaped.  Only for strings this code
// builds itself from constants.
function raw(s) { return new Safe(String(s)); }

// url(path, params): a path with a query string; empty params are left out.
function url(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.append(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

module.exports = { html, raw, escape, url, Safe };
