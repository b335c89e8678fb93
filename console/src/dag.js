'use strict';
// dag.js: a run's steps drawn as their DAG, as server-side SVG.
//
// The edges are the definition's (docs/workflows.md, "The graph"):
// depends_on, on_success, on_failure, on_timeout and a decision's targets.
// Layout: each step in the layer of its longest path from an entry step
// (left to right), steps of a layer ordered by a barycenter pass over their
// predecessors; edges are curves from the right of one box to the left of
// the next.  Each box links to the step's section of the run page and is
// coloured by the step's state (classes in static/console.css).

const { html } = require('./html');

const W = 156;      // box width
const H = 58;       // box height
const GX = 40;      // gap between layers
const GY = 22;      // gap between boxes of a layer
const PAD = 16;

const EDGE_KINDS = {
  depends_on: 'depends on',
  on_success: 'on success',
  on_failure: 'on failure',
  on_timeout: 'on timeout',
  target: 'decision target',
};

function refs(v) {
  if (v === undefined || v === null) return [];
  return Array.isArray(v) ? v.filter((x) => typeof x === 'string') : (typeof v === 'string' ? [v] : []);
}

// edgesOf(steps): [{from, to, kind}] of a definition's steps.
function edgesOf(steps) {
  const ids = new Set(steps.map((s) => s.step_id));
  const edges = [];
  for (const s of steps) {
    for (const d of refs(s.depends_on)) edges.push({ from: d, to: s.step_id, kind: 'depends_on' });
    for (const k of ['on_success', 'on_failure', 'on_timeout']) {
      for (const t of refs(s[k])) edges.push({ from: s.step_id, to: t, kind: k });
    }
    for (const t of refs(s.targets)) edges.push({ from: s.step_id, to: t, kind: 'target' });
  }
  return edges.filter((e) => ids.has(e.from) && ids.has(e.to) && e.from !== e.to);
}

// layout(ids, edges): {layer: Map id->layer, rows: [[id...] per layer]}
function layout(ids, edges) {
  const preds = new Map(ids.map((id) => [id, []]));
  const succs = new Map(ids.map((id) => [id, []]));
  for (const e of edges) { preds.get(e.to).push(e.from); succs.get(e.from).push(e.to); }
  // Kahn's order; longest path layering.
  const indeg = new Map(ids.map((id) => [id, preds.get(id).length]));
  const layer = new Map(ids.map((id) => [id, 0]));
  const queue = ids.filter((id) => indeg.get(id) === 0);
  const seen = new Set();
  while (queue.length) {
    const id = queue.shift();
    seen.add(id);
    for (const t of succs.get(id)) {
      layer.set(t, Math.max(layer.get(t), layer.get(id) + 1));
      indeg.set(t, indeg.get(t) - 1);
      if (indeg.get(t) === 0) queue.push(t);
    }
  }
  // A cycle cannot pass validation; should one appear, its steps go last.
  let maxLayer = Math.max(0, ...[...layer.values()]);
  for (const id of ids) if (!seen.has(id)) layer.set(id, ++maxLayer);

  const order = new Map(ids.map((id, i) => [id, i]));
  const rows = [];
  for (const id of ids) {
    const l = layer.get(id);
    (rows[l] = rows[l] || []).push(id);
  }
  for (let l = 0; l < rows.length; l++) rows[l] = rows[l] || [];
  // One barycenter pass: order each layer by the mean row of its
  // predecessors (definition order breaks ties and places steps without
  // predecessors).
  const pos = new Map();
  rows.forEach((row) => row.forEach((id, i) => pos.set(id, i)));
  for (let l = 1; l < rows.length; l++) {
    const key = (id) => {
      const p = preds.get(id).filter((x) => layer.get(x) < l);
      return p.length ? p.reduce((a, x) => a + pos.get(x), 0) / p.length : pos.get(id);
    };
    rows[l].sort((a, b) => key(a) - key(b) || order.get(a) - order.get(b));
    rows[l].forEach((id, i) => pos.set(id, i));
  }
  return { layer, rows };
}

function clip(s, n) {
  s = String(s);
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

// renderDag(specSteps, stepsById): the SVG.  stepsById maps a step id to
// what the run says of it ({type, state, compensation}).
function renderDag(specSteps, stepsById) {
  const steps = specSteps.filter((s) => s && typeof s.step_id === 'string');
  for (const id of Object.keys(stepsById)) {
    if (!steps.some((s) => s.step_id === id)) steps.push({ step_id: id });
  }
  const ids = steps.map((s) => s.step_id);
  const edges = edgesOf(steps);
  const { rows } = layout(ids, edges);
  const tallest = Math.max(1, ...rows.map((r) => r.length));
  const width = PAD * 2 + rows.length * W + (rows.length - 1) * GX;
  const height = PAD * 2 + tallest * H + (tallest - 1) * GY;
  const at = new Map();
  rows.forEach((row, l) => {
    const offset = ((tallest - row.length) * (H + GY)) / 2;
    row.forEach((id, i) => at.set(id, { x: PAD + l * (W + GX), y: PAD + offset + i * (H + GY) }));
  });

  const edgeSvg = edges.map((e) => {
    const a = at.get(e.from);
    const b = at.get(e.to);
    const x1 = a.x + W;
    const y1 = a.y + H / 2;
    const x2 = b.x - 2;
    const y2 = b.y + H / 2;
    const dx = Math.max(GX / 2, (x2 - x1) / 3);
    const d = `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
    return html`<path class="edge edge-${e.kind}" d="${d}" marker-end="url(#arrow-${e.kind})"><title>${e.from} → ${e.to} (${EDGE_KINDS[e.kind]})</title></path>`;
  });

  const nodeSvg = steps.map((s) => {
    const p = at.get(s.step_id);
    const run = stepsById[s.step_id] || {};
    const type = run.type || s.type || 'task';
    const state = run.state || 'not started';
    const cls = String(state).replace(/[^a-z_]/g, '_');
    return html`<a href="#step-${s.step_id}" class="node state-${cls}" data-step="${s.step_id}" data-state="${state}">
<title>${s.step_id} (${type}): ${state}${run.compensation ? `, compensation ${run.compensation}` : ''}</title>
<rect x="${p.x}" y="${p.y}" width="${W}" height="${H}" rx="6"/>
<text x="${p.x + 10}" y="${p.y + 19}" class="node-id">${clip(s.step_id, 20)}</text>
<text x="${p.x + 10}" y="${p.y + 36}" class="node-type">${clip(type, 22)}</text>
<text x="${p.x + 10}" y="${p.y + 51}" class="node-state">${clip(state, 17)}${run.compensation ? clip(` ↺ ${run.compensation}`, 12) : ''}</text>
</a>`;
  });

  const markers = Object.keys(EDGE_KINDS).map((k) => html`<marker id="arrow-${k}" class="arrow arrow-${k}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker>`);

  return html`<svg class="dag" xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="steps of the run as a graph">
<defs>${markers}</defs>
${edgeSvg}
${nodeSvg}
</svg>`;
}

function legend() {
  return html`<p class="legend">${Object.entries(EDGE_KINDS).map(([k, label]) => html`<span class="lg lg-${k}">${label}</span> `)}</p>`;
}

module.exports = { renderDag, legend, edgesOf, layout };
