'use strict';
// dag.js: a run's steps drawn as their DAG, as server-side SVG.
//
// The edges are the definition's (docs/workflows.md, "The graph"):
// depends_on, on_success, on_failure, on_timeout and a decision's targets.
// Layout: each step in the layer of its longest path from an entry step
// (left to right); an edge that skips layers gets a waypoint in each layer
// it crosses, which takes a slot there like a box does, so that no box
// stands in its way; the steps and waypoints of a layer are ordered by a
// barycenter pass over their predecessors.  An edge is drawn from the right
// of one box, through its waypoints, to the left of its target box.  Each box links to the step's section of the run page and is
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

  // Waypoints: an edge from layer i to layer j > i + 1 becomes a chain
  // through one waypoint in each layer between.
  const chains = new Map();   // edge index -> [waypoint ids]
  const all = [...ids];
  const order = new Map(ids.map((id, i) => [id, i]));
  const unit = [];            // edges of one layer each: {from, to}
  edges.forEach((e, i) => {
    const a = layer.get(e.from);
    const b = layer.get(e.to);
    if (b <= a + 1) { unit.push({ from: e.from, to: e.to }); return; }
    const way = [];
    let prev = e.from;
    for (let l = a + 1; l < b; l++) {
      const v = `\u0000${i}:${l}`;
      layer.set(v, l);
      order.set(v, ids.length + i);
      all.push(v);
      way.push(v);
      unit.push({ from: prev, to: v });
      prev = v;
    }
    unit.push({ from: prev, to: e.to });
    chains.set(i, way);
  });
  const preds2 = new Map(all.map((id) => [id, []]));
  for (const e of unit) preds2.get(e.to).push(e.from);

  const rows = [];
  for (const id of all) {
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
      const p = preds2.get(id).filter((x) => layer.get(x) < l);
      return p.length ? p.reduce((a, x) => a + pos.get(x), 0) / p.length : pos.get(id);
    };
    rows[l].sort((a, b) => key(a) - key(b) || order.get(a) - order.get(b));
    rows[l].forEach((id, i) => pos.set(id, i));
  }
  return { layer, rows, chains };
}

function clip(s, n) {
  s = String(s);
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

// renderDag(specSteps, stepsById): the SVG.  stepsById maps a step id to
// what the run says of it ({type, state, compensation, child}: child, of a
// subflow step, says which run it started, e.g. "run 12" or "3 runs").
function renderDag(specSteps, stepsById) {
  const steps = specSteps.filter((s) => s && typeof s.step_id === 'string');
  for (const id of Object.keys(stepsById)) {
    if (!steps.some((s) => s.step_id === id)) steps.push({ step_id: id });
  }
  const ids = steps.map((s) => s.step_id);
  const edges = edgesOf(steps);
  const { rows, chains } = layout(ids, edges);
  const tallest = Math.max(1, ...rows.map((r) => r.length));
  const width = PAD * 2 + rows.length * W + (rows.length - 1) * GX;
  const height = PAD * 2 + tallest * H + (tallest - 1) * GY;
  const at = new Map();
  rows.forEach((row, l) => {
    const offset = ((tallest - row.length) * (H + GY)) / 2;
    row.forEach((id, i) => at.set(id, { x: PAD + l * (W + GX), y: PAD + offset + i * (H + GY) }));
  });

  const curve = (x1, y1, x2, y2) => {
    const dx = Math.max(GX / 2, (x2 - x1) / 3);
    return `C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
  };
  const edgeSvg = edges.map((e, i) => {
    const a = at.get(e.from);
    const b = at.get(e.to);
    let x = a.x + W;
    let y = a.y + H / 2;
    let d = `M${x},${y}`;
    // through each waypoint: into its slot, straight across it
    for (const v of chains.get(i) || []) {
      const p = at.get(v);
      d += ` ${curve(x, y, p.x, p.y + H / 2)} L${p.x + W},${p.y + H / 2}`;
      x = p.x + W;
      y = p.y + H / 2;
    }
    d += ` ${curve(x, y, b.x - 2, b.y + H / 2)}`;
    return html`<path class="edge edge-${e.kind}" data-from="${e.from}" data-to="${e.to}" d="${d}" marker-end="url(#arrow-${e.kind})"><title>${e.from} → ${e.to} (${EDGE_KINDS[e.kind]})</title></path>`;
  });

  const nodeSvg = steps.map((s) => {
    const p = at.get(s.step_id);
    const run = stepsById[s.step_id] || {};
    const type = run.type || s.type || 'task';
    const state = run.state || 'not started';
    const cls = String(state).replace(/[^a-z_]/g, '_');
    return html`<a href="#step-${s.step_id}" class="node state-${cls}" data-step="${s.step_id}" data-state="${state}">
<title>${s.step_id} (${type}): ${state}${run.compensation ? `, compensation ${run.compensation}` : ''}${run.child ? `, child ${run.child}` : ''}</title>
<rect x="${p.x}" y="${p.y}" width="${W}" height="${H}" rx="6"/>
<text x="${p.x + 10}" y="${p.y + 19}" class="node-id">${clip(s.step_id, 20)}</text>
<text x="${p.x + 10}" y="${p.y + 36}" class="node-type">${clip(run.child ? `${type} → ${run.child}` : type, 22)}</text>
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
