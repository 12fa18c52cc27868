// The ranks dashboard: one self-contained ES module, loaded by TensorBoard in the plugin's iframe.
// Everything comes from this plugin's JSON routes (relative URLs: the iframe's base is
// /data/plugin/ranks/), drawn on canvases; no library, no network beyond this TensorBoard.

const CHANNEL_LABELS = {
  step_time_ms: 'step time (relative to the record median)',
  host_rss_gb: 'host memory (GB)',
  device_mem_allocated_gb: 'device memory allocated (GB)',
  device_mem_peak_gb: 'device memory peak (GB)',
  loss: 'loss (each rank\'s mean over the interval)',
};
// White -> yellow -> orange -> red -> dark red: the slow (or full) cells stand out.
const RAMP = [[255, 255, 255], [255, 237, 160], [254, 178, 76], [240, 59, 32], [128, 0, 38]];
const LEFT = 130; // room for node names and rank labels beside the heatmap
const RANK_LABELS = 40; // of which the rank labels' column, right-aligned against the heatmap
const BOTTOM = 18; // room for the step axis under the heatmap
const state = { run: null, channel: 'step_time_ms', matrix: null, rank: null };

const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};
const getJson = async (path, params) => {
  const response = await fetch(`./${path}?${new URLSearchParams(params)}`);
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
};

function colour(t) {
  const x = Math.min(Math.max(t, 0), 1) * (RAMP.length - 1);
  const i = Math.min(Math.floor(x), RAMP.length - 2);
  const f = x - i;
  return RAMP[i].map((c, k) => Math.round(c + (RAMP[i + 1][k] - c) * f));
}

// The colour scale's ends: relative step time is centred on the median (1) and reaches at least 1.2.
function scale(m) {
  if (m.relative_to_median) return [Math.min(m.min ?? 1, 1), Math.max(m.max ?? 1.2, 1.2)];
  const lo = m.min ?? 0;
  return [lo, Math.max(m.max ?? 1, lo + 1e-6)];
}

function drawHeatmap(canvas, m) {
  const [lo, hi] = scale(m);
  const image = new ImageData(m.columns, m.rows);
  m.values.forEach((row, r) => row.forEach((v, c) => {
    const [red, green, blue] = v === null ? [220, 220, 220] : colour((v - lo) / (hi - lo));
    image.data.set([red, green, blue, 255], (r * m.columns + c) * 4);
  }));
  const cells = el('canvas', { width: m.columns, height: m.rows });
  cells.getContext('2d').putImageData(image, 0, 0);
  const width = Math.max(document.body.clientWidth - 40, 400);
  canvas.width = width;
  canvas.height = Math.min(Math.max(m.rows * 4, 160), 520) + BOTTOM;
  const ctx = canvas.getContext('2d');
  const cellsHeight = canvas.height - BOTTOM;
  ctx.imageSmoothingEnabled = false;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(cells, LEFT, 0, width - LEFT, cellsHeight);
  ctx.font = '11px sans-serif';
  const rowHeight = cellsHeight / m.rows;
  const rowLabels = [];
  let lastNode = -Infinity;
  let lastRank = -Infinity;
  m.first_rank.forEach((first, r) => {
    const y = r * rowHeight;
    // Node boundaries and names: a line where the node changes, its name where there is room.
    if (r === 0 || m.node[r] !== m.node[r - 1]) {
      ctx.fillStyle = '#888';
      if (r > 0 && rowHeight >= 4) ctx.fillRect(LEFT - RANK_LABELS, y, canvas.width, 1); // none when rows are thin
      ctx.fillStyle = '#333';
      ctx.textAlign = 'left';
      if (y - lastNode >= 12) {
        ctx.fillText(m.node_names[m.node[r]] ?? `node ${m.node[r]}`, 2, y + 11, LEFT - RANK_LABELS - 6);
        lastNode = y;
      }
    }
    // Each row's rank (or block of ranks), where there is room.
    if (y - lastRank >= 12) {
      const label = m.rank_block > 1 ? `${first}..${first + m.rank_block - 1}` : String(first);
      ctx.fillStyle = '#555';
      ctx.textAlign = 'right';
      ctx.fillText(label, LEFT - 4, Math.max(y + rowHeight / 2 + 4, 10), RANK_LABELS - 4); // centred on its row
      rowLabels.push(label);
      lastRank = y;
    }
  });
  // The step axis: the first step of a column every ~100 px.
  const columnWidth = (width - LEFT) / m.columns;
  const every = Math.max(1, Math.ceil(100 / columnWidth));
  const stepTicks = [];
  ctx.fillStyle = '#333';
  ctx.textAlign = 'left';
  for (let c = 0; c < m.columns; c += every) {
    const x = LEFT + c * columnWidth;
    ctx.fillRect(x, cellsHeight, 1, 4);
    ctx.fillText(c === 0 ? `step ${m.steps[c]}` : String(m.steps[c]), x + 2, canvas.height - 3);
    stepTicks.push(m.steps[c]);
  }
  canvas.dataset.drawn = String(m.rows * m.columns);
  canvas.dataset.rowLabels = JSON.stringify(rowLabels);
  canvas.dataset.stepTicks = JSON.stringify(stepTicks);
}

function cellAt(canvas, m, event) {
  const box = canvas.getBoundingClientRect();
  const x = event.clientX - box.left - LEFT;
  const y = event.clientY - box.top;
  if (x < 0) return null;
  const column = Math.floor((x / (canvas.width - LEFT)) * m.columns);
  const row = Math.floor((y / (canvas.height - BOTTOM)) * m.rows);
  if (row < 0 || row >= m.rows || column < 0 || column >= m.columns) return null;
  return { row, column };
}

function describe(m, { row, column }) {
  const first = m.first_rank[row];
  const ranks = m.rank_block > 1 ? `ranks ${first}..${first + m.rank_block - 1}` : `rank ${first}`;
  const step = m.steps[column];
  const steps = m.step_block > 1 ? `steps from ${step} (${m.step_block} records)` : `step ${step}`;
  const v = m.values[row][column];
  const value = v === null ? 'no value' : m.relative_to_median ? `${v.toFixed(3)} x median` : `${v.toFixed(3)} GB`;
  return `${ranks}, node ${m.node_names[m.node[row]] ?? m.node[row]}, ${steps}: ${value}`;
}

function drawSeries(canvas, steps, values, medians) {
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const all = [...values, ...medians].filter((v) => v !== null);
  if (!all.length || !steps.length) return;
  const lo = Math.min(...all);
  const hi = Math.max(...all, lo + 1e-6);
  const x = (i) => 40 + ((canvas.width - 50) * i) / Math.max(steps.length - 1, 1);
  const y = (v) => canvas.height - 15 - ((canvas.height - 25) * (v - lo)) / (hi - lo);
  for (const [series, stroke] of [[medians, '#999'], [values, '#d7301f']]) {
    ctx.strokeStyle = stroke;
    ctx.beginPath();
    series.forEach((v, i) => v !== null && (i ? ctx.lineTo(x(i), y(v)) : ctx.moveTo(x(i), y(v))));
    ctx.stroke();
  }
  ctx.fillStyle = '#333';
  ctx.font = '11px sans-serif';
  ctx.fillText(hi.toPrecision(4), 0, 12);
  ctx.fillText(lo.toPrecision(4), 0, canvas.height - 15);
  ctx.fillText(`step ${steps[0]}`, 40, canvas.height - 2);
  ctx.fillText(`step ${steps[steps.length - 1]}`, canvas.width - 80, canvas.height - 2);
}

async function showRank(ui, rank) {
  state.rank = rank;
  const data = await getJson('rank', { run: state.run, rank });
  ui.detailTitle.textContent = `rank ${data.rank} on ${data.node_name ?? `node ${data.node}`}: ${
    CHANNEL_LABELS[state.channel].replace(' (relative to the record median)', ' (ms)')
  }, red; the median over ranks, grey`;
  ui.log.textContent = data.worker_log ? `worker log: ${data.worker_log}` : 'worker log: not known';
  drawSeries(ui.series, data.steps, data.channels[state.channel], data.medians[state.channel]);
}

// What the records say of a straggler, and only that: a count of 0 has no "how much" to show.
function stragglerFacts(s, factor) {
  const facts = [];
  if (s.slow) {
    facts.push(`slow in ${s.slow} record(s) (above ${factor}x the median) since step ${s.since_step}, ${
      s.mean_relative_when_slow.toFixed(3)}x the median on average then`);
  }
  if (s.slowest) {
    facts.push(`the slowest rank in ${s.slowest} record(s), ${
      s.mean_relative_when_slowest.toFixed(3)}x the median then`);
  }
  if (s.slow_node) {
    facts.push(`on slow node ${s.node_name ?? s.node} (all its ranks slow in ${s.slow_node.records} record(s), `
      + `its median ${s.slow_node.mean_relative.toFixed(3)}x the job median then)`);
  }
  return facts;
}

async function refresh(ui) {
  const runs = await getJson('runs', {});
  if (!runs.length) {
    ui.info.textContent = 'No run under this logdir holds ranks records.';
    return;
  }
  ui.runs.replaceChildren(...runs.map((r) => el('option', { value: r.run, textContent: r.run })));
  if (!runs.some((r) => r.run === state.run)) state.run = runs[0].run;
  ui.runs.value = state.run;
  const run = runs.find((r) => r.run === state.run);
  ui.info.textContent = `${run.world_size} ranks on ${run.nodes} node(s), ${run.records} records, steps ${
    run.first_step}..${run.last_step}`;
  const width = Math.max(document.body.clientWidth - 40 - LEFT, 200);
  const [m, slow] = await Promise.all([
    getJson('matrix', { run: state.run, channel: state.channel, max_ranks: 256, max_steps: Math.min(width, 1024) }),
    getJson('stragglers', { run: state.run, limit: 20 }),
  ]);
  state.matrix = m;
  drawHeatmap(ui.heatmap, m);
  const [lo, hi] = scale(m);
  ui.legend.textContent = `colour: ${lo.toFixed(3)} (white) .. ${hi.toFixed(3)} (dark red); blocks of ${
    m.rank_block} rank(s) x ${m.step_block} record(s), each showing its maximum`;
  ui.stragglers.replaceChildren(...slow.ranks.map((s) => {
    const item = el('li', { textContent: `rank ${s.rank} (${s.node_name ?? `node ${s.node}`}): ${
      stragglerFacts(s, slow.slow_factor).join('; ')}` });
    item.dataset.rank = s.rank;
    item.style.cursor = 'pointer';
    item.addEventListener('click', () => showRank(ui, s.rank));
    return item;
  }));
  if (!slow.ranks.length) ui.stragglers.append(el('li', { textContent: 'none' }));
  // A host, not a rank: every rank of the node slow in the same records.
  ui.slowNodes.replaceChildren(...slow.nodes.map((n) => el('li', {
    textContent: `node ${n.node_name ?? n.node}: ${n.ranks} of ${n.ranks} ranks slow in ${n.records} record(s)${
      n.since_step === null ? '' : `, since step ${n.since_step}`}, its median ${
      n.mean_relative.toFixed(3)}x the job median then`,
  })));
  if (state.rank !== null) await showRank(ui, state.rank);
}

export async function render() {
  document.body.style.cssText = 'font: 13px sans-serif; margin: 16px; color: #212121;';
  const ui = {
    runs: el('select'),
    channels: el('select', {}, ...Object.entries(CHANNEL_LABELS).map(([value, label]) =>
      el('option', { value, textContent: label }))),
    info: el('span', { id: 'info' }),
    heatmap: el('canvas', { id: 'heatmap' }),
    tip: el('div', { id: 'tip' }),
    legend: el('div', { id: 'legend' }),
    stragglers: el('ol', { id: 'stragglers' }),
    slowNodes: el('ul', { id: 'slow-nodes' }),
    detailTitle: el('div', { id: 'rank-title', textContent: 'Click a rank in the heatmap or the list.' }),
    log: el('div', { id: 'worker-log' }),
    series: el('canvas', { id: 'series', width: 900, height: 180 }),
  };
  ui.tip.style.cssText = 'position: fixed; pointer-events: none; background: #fff; border: 1px solid #999;'
    + ' padding: 2px 6px; display: none;';
  ui.heatmap.style.cursor = 'crosshair';
  document.body.append(
    el('div', {}, 'Run ', ui.runs, ' colour: ', ui.channels, ' ', ui.info),
    el('h3', { textContent: 'Ranks (rows, grouped by node) x steps' }), ui.heatmap, ui.legend, ui.tip,
    el('h3', { textContent: 'Stragglers' }), ui.slowNodes, ui.stragglers,
    el('h3', { textContent: 'One rank' }), ui.detailTitle, ui.log, ui.series,
  );
  ui.runs.addEventListener('change', () => { state.run = ui.runs.value; state.rank = null; refresh(ui); });
  ui.channels.addEventListener('change', () => { state.channel = ui.channels.value; refresh(ui); });
  ui.heatmap.addEventListener('mousemove', (event) => {
    const cell = state.matrix && cellAt(ui.heatmap, state.matrix, event);
    ui.tip.style.display = cell ? 'block' : 'none';
    if (!cell) return;
    ui.tip.textContent = describe(state.matrix, cell);
    ui.tip.style.left = `${event.clientX + 12}px`;
    ui.tip.style.top = `${event.clientY + 12}px`;
  });
  ui.heatmap.addEventListener('mouseleave', () => { ui.tip.style.display = 'none'; });
  ui.heatmap.addEventListener('click', (event) => {
    const cell = state.matrix && cellAt(ui.heatmap, state.matrix, event);
    if (cell) showRank(ui, state.matrix.first_rank[cell.row]);
  });
  ui.info.textContent = 'Reading the records...'; // the first read of a large job takes seconds
  const update = () => refresh(ui).catch((error) => { ui.info.textContent = String(error); });
  await update();
  setInterval(update, 30000); // new records arrive while a job trains
}
