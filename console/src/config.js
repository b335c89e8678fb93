'use strict';
// config.js: command-line flags and environment variables.
//
//   --host H          ORCH_CONSOLE_HOST           bind address (127.0.0.1)
//   --port N          ORCH_CONSOLE_PORT           port (8089)
//   --db URL          ORCH_CONSOLE_DB             connection string (else libpq's PG* variables)
//   --readonly        ORCH_CONSOLE_READONLY=1     no actions: no forms, every POST refused (403)
//   --allowed-host H  ORCH_CONSOLE_ALLOWED_HOSTS  extra Host header values to accept
//                                                 (comma separated, host:port), e.g. behind a proxy
// A flag wins over its variable.

const USAGE = `usage: node src/server.js [--host H] [--port N] [--db URL] [--readonly] [--allowed-host HOST:PORT]...
  --host          bind address (ORCH_CONSOLE_HOST, default 127.0.0.1: loopback only)
  --port          port (ORCH_CONSOLE_PORT, default 8089)
  --db            connection string, e.g. postgresql://role@host:5499/orchestrator
                  (ORCH_CONSOLE_DB; default: libpq's PGHOST, PGPORT, PGUSER, PGDATABASE)
  --readonly      read-only mode (ORCH_CONSOLE_READONLY=1): no action forms, POSTs refused
  --allowed-host  also accept this Host header (ORCH_CONSOLE_ALLOWED_HOSTS, comma separated)`;

function truthy(v) {
  return v !== undefined && /^(1|true|yes|on)$/i.test(String(v).trim());
}

function parse(argv, env) {
  const cfg = {
    host: env.ORCH_CONSOLE_HOST || '127.0.0.1',
    port: env.ORCH_CONSOLE_PORT || '8089',
    db: env.ORCH_CONSOLE_DB || '',
    readonly: truthy(env.ORCH_CONSOLE_READONLY),
    allowedHosts: (env.ORCH_CONSOLE_ALLOWED_HOSTS || '').split(',').map((s) => s.trim()).filter(Boolean),
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let val;
    const eq = a.indexOf('=');
    if (a.startsWith('--') && eq > 0) { val = a.slice(eq + 1); a = a.slice(0, eq); }
    const need = () => {
      if (val !== undefined) return val;
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--host': cfg.host = need(); break;
      case '--port': cfg.port = need(); break;
      case '--db': cfg.db = need(); break;
      case '--readonly': cfg.readonly = val === undefined ? true : truthy(val); break;
      case '--allowed-host': cfg.allowedHosts.push(need()); break;
      case '-h': case '--help': cfg.help = true; break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  const port = Number(cfg.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`bad port ${cfg.port}`);
  cfg.port = port;
  if (!cfg.host) throw new Error('empty --host');
  return cfg;
}

// Is this bind address loopback only?
function isLoopback(host) {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

module.exports = { parse, isLoopback, USAGE };
