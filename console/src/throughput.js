'use strict';
// throughput.js: per-minute throughput of each queue, for the sparklines of
// the Queues page.
//
// The extension folds enqueued, completed and failed tasks per minute, and
// orch_throughput('1 hour') reads them: load() takes that series as it is,
// so the lines are whole from the console's first page.  Against an
// extension without orch_throughput the sampler falls back to the totals
// (orch_queue_stats: enqueued_total, completed_total, failed_total, as of
// metrics_as_of), read every minute and whenever the Queues page is shown:
// what a total grew by between two folds is counted in the minute of the
// later fold, and the series starts when the console starts.

const { html } = require('./html');

const MINUTES = 60;
const METRICS = ['enqueued', 'completed', 'failed'];

function minuteOf(ts) {
  const t = Date.parse(ts);
  return Number.isNaN(t) ? null : Math.floor(t / 60000);
}

class Sampler {
  constructor() {
    this.last = new Map();      // "queue\ttenant" -> {asOf, enqueued, completed, failed}
    this.buckets = new Map();   // "queue\ttenant" -> Map(minute -> {enqueued, completed, failed})
    this.since = null;          // the minute of the first sample
  }

  // record(rows): rows of orch_queue_stats (queue, tenant_id, *_total,
  // metrics_as_of).
  record(rows) {
    for (const r of rows) {
      const key = `${r.queue}\t${r.tenant_id}`;
      const now = { asOf: r.metrics_as_of, enqueued: Number(r.enqueued_total || 0),
        completed: Number(r.completed_total || 0), failed: Number(r.failed_total || 0) };
      const prev = this.last.get(key);
      this.last.set(key, now);
      const minute = minuteOf(r.metrics_as_of);
      if (this.since === null && minute !== null) this.since = minute;
      if (!prev || prev.asOf === now.asOf || minute === null) continue;
      let b = this.buckets.get(key);
      if (!b) this.buckets.set(key, (b = new Map()));
      const cell = b.get(minute) || { enqueued: 0, completed: 0, failed: 0 };
      for (const m of METRICS) cell[m] += Math.max(0, now[m] - prev[m]);
      b.set(minute, cell);
      for (const k of b.keys()) if (k <= minute - MINUTES) b.delete(k);
    }
  }

  // load(rows): rows of orch_throughput (minute as a number of minutes since
  // the epoch, queue, tenant_id, enqueued, completed, failed): the series,
  // replacing what the sampler counted.
  load(rows) {
    this.buckets = new Map();
    for (const r of rows) {
      const key = `${r.queue}\t${r.tenant_id}`;
      let b = this.buckets.get(key);
      if (!b) this.buckets.set(key, (b = new Map()));
      b.set(Number(r.minute), { enqueued: Number(r.enqueued), completed: Number(r.completed),
        failed: Number(r.failed) });
    }
  }

  // series(queue, tenant, nowMinute): MINUTES cells, oldest first.
  series(queue, tenant, nowMinute = Math.floor(Date.now() / 60000)) {
    const b = this.buckets.get(`${queue}\t${tenant}`) || new Map();
    const out = [];
    for (let m = nowMinute - MINUTES + 1; m <= nowMinute; m++) {
      out.push(b.get(m) || { enqueued: 0, completed: 0, failed: 0 });
    }
    return out;
  }
}

// sparkline(series): a small SVG, one line per metric, with the sums of the
// hour in its data attributes and title.
function sparkline(series) {
  const W = 120;
  const H = 26;
  const max = Math.max(1, ...series.flatMap((c) => METRICS.map((m) => c[m])));
  const sums = Object.fromEntries(METRICS.map((m) => [m, series.reduce((a, c) => a + c[m], 0)]));
  const step = W / Math.max(1, series.length - 1);
  const line = (m) => series.map((c, i) => `${(i * step).toFixed(1)},${(H - 2 - (c[m] / max) * (H - 4)).toFixed(1)}`).join(' ');
  return html`<svg class="spark" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img"
 data-enqueued="${sums.enqueued}" data-completed="${sums.completed}" data-failed="${sums.failed}"
 aria-label="last hour: ${sums.enqueued} enqueued, ${sums.completed} completed, ${sums.failed} failed"><title>last hour, per minute: ${sums.enqueued} enqueued, ${sums.completed} completed, ${sums.failed} failed (peak ${max}/min)</title>
${METRICS.map((m) => html`<polyline class="spark-${m}" points="${line(m)}"/>`)}
</svg>`;
}

module.exports = { Sampler, sparkline, MINUTES };
