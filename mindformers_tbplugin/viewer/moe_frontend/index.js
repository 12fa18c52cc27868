// The moe dashboard: one self-contained ES module, loaded by TensorBoard in the plugin's iframe.
// Everything comes from this plugin's JSON routes (relative URLs: the iframe's base is
// /data/plugin/moe/), drawn on canvases; no library, no network beyond this TensorBoard.

// Diverging, centred on the layer's mean load: blue = starved, white = balanced, red = overloaded.
// Its blue end stays light enough that the dead experts' black stands apart from it.
const DIVERGING = [[33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [239, 138, 98], [178, 24, 43]];
// MaxVio over the run: white -> yellow -> orange -> red -> dark red.
const RAMP = [[255, 255, 255], [255, 237, 160], [254, 178, 76], [240, 59, 32], [128, 0, 38]];
const DEAD = [0, 0, 0];
const NO_VALUE = [200, 200, 200];
const LEFT = 104; // room for the layer names
const RIGHT = 120; // beside the heatmap: each layer's MaxVio bar and dead count
const BOTTOM = 16; // expert numbers under the heatmap
const PLAY_MS = 250;
const state = {
  run: null, summary: null, strip: null, record: null, index: 0, follow: true, channel: 'load',
  range: 2, row: null, playing: null, wanted: null, loading: false,
};

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
const fmt = (n) => Number(n).toLocaleString('en-US');
const plural = (n, one, many = `${one}s`) => `${fmt(n)} ${n === 1 ? one : many}`;

function blend(stops, t) {
  const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  return stops[i].map((c, k) => Math.round(c + (stops[i + 1][k] - c) * (x - i)));
}
// t in -1..1 on the diverging scale.
const diverging = (t) => blend(DIVERGING, (Math.min(Math.max(t, -1), 1) + 1) / 2);
const css = ([r, g, b]) => `rgb(${r},${g},${b})`;
// MaxVio colours, linear from 0 to the run's largest (at least 1): the worst layer is the darkest.
const vioHigh = () => Math.max(1, state.strip?.max ?? 1);
const vioColour = (v) => blend(RAMP, Math.max(v, 0) / vioHigh());

function loadColour(v) {
  if (v === null) return NO_VALUE;
  if (v < state.summary.dead_fraction) return DEAD;
  return diverging(Math.log(v) / Math.log(state.range));
}

// The bias colour scale's end: the 99th percentile of |bias|, so that a few experts the router pushes
// hard (the dead ones) saturate instead of washing out every other layer.
function biasScale(rec) {
  const sizes = (rec.bias ?? []).flat().filter((v) => v !== null).map(Math.abs).sort((a, b) => a - b);
  return sizes[Math.floor(0.99 * (sizes.length - 1))] || sizes[sizes.length - 1] || 1;
}

function cellImage(rows, columns, colourOf) {
  const image = new ImageData(columns, rows);
  for (let i = 0; i < rows * columns; i += 1) {
    image.data.set([...colourOf(Math.floor(i / columns), i % columns), 255], 4 * i);
  }
  const canvas = el('canvas', { width: columns, height: rows });
  canvas.getContext('2d').putImageData(image, 0, 0);
  return canvas;
}

function rowLabels(ctx, groups, rowHeight) {
  ctx.fillStyle = '#333';
  ctx.font = '11px sans-serif';
  ctx.textBaseline = 'middle';
  const every = Math.max(1, Math.ceil(12 / rowHeight));
  groups.forEach((name, r) => {
    const y = Math.min(Math.max(r * rowHeight + rowHeight / 2, 6), groups.length * rowHeight - 6);
    if (r % every === 0) ctx.fillText(name, 2, y);
  });
  ctx.textBaseline = 'alphabetic';
}

// -- the heatmap of one record ---------------------------------------------------------------------
function heatmapGeometry(canvas) {
  const { groups, experts } = state.summary;
  const rowHeight = Math.max(5, Math.min(16, Math.floor(560 / groups.length)));
  return { rowHeight, cellWidth: (canvas.width - LEFT - RIGHT) / experts, height: rowHeight * groups.length };
}

function drawHeatmap(canvas) {
  const rec = state.record;
  const { groups, experts } = state.summary;
  canvas.width = Math.max(document.body.clientWidth - 40, 500);
  const { rowHeight, cellWidth, height } = heatmapGeometry(canvas);
  canvas.height = height + BOTTOM;
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const bias = state.channel === 'bias' && rec.bias;
  const top = bias ? biasScale(rec) : 1;
  const values = bias ? rec.bias : rec.load;
  const cells = cellImage(groups.length, experts, (r, c) => {
    const v = values[r]?.[c] ?? null;
    if (!bias) return loadColour(v);
    return v === null ? NO_VALUE : diverging(v / top);
  });
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(cells, LEFT, 0, experts * cellWidth, height);
  rowLabels(ctx, groups, rowHeight);
  ctx.fillStyle = '#555';
  const tick = Math.max(1, 2 ** Math.ceil(Math.log2(experts / 16)));
  for (let e = 0; e < experts; e += tick) ctx.fillText(String(e), LEFT + e * cellWidth, height + 12);
  // Beside each row: its MaxVio as a bar (the run's scale) and its dead experts.
  const barLeft = canvas.width - RIGHT + 6;
  ctx.fillText('MaxVio, dead', barLeft, height + 12);
  ctx.textBaseline = 'middle';
  rec.max_violation.forEach((v, r) => {
    const y = r * rowHeight + 1;
    ctx.fillStyle = '#eee';
    ctx.fillRect(barLeft, y, 60, Math.max(rowHeight - 2, 1));
    if (v === null) return;
    ctx.fillStyle = '#757575'; // the length tells: light ramp colours would vanish against the track
    ctx.fillRect(barLeft, y, Math.max(1, (60 * v) / vioHigh()), Math.max(rowHeight - 2, 1));
    if (rec.dead[r]) {
      ctx.fillStyle = '#000';
      ctx.fillText(`${rec.dead[r]} dead`, barLeft + 64, r * rowHeight + rowHeight / 2);
    }
  });
  ctx.textBaseline = 'alphabetic';
  if (state.row !== null) {
    ctx.strokeStyle = '#1565c0';
    ctx.lineWidth = 2;
    ctx.strokeRect(LEFT - 1, state.row * rowHeight, experts * cellWidth + 2, rowHeight);
  }
  canvas.dataset.drawn = `${groups.length}x${experts}`;
  canvas.dataset.step = String(rec.step);
}

function heatmapCell(canvas, event) {
  const box = canvas.getBoundingClientRect();
  const { rowHeight, cellWidth } = heatmapGeometry(canvas);
  const row = Math.floor((event.clientY - box.top) / rowHeight);
  const expert = Math.floor((event.clientX - box.left - LEFT) / cellWidth);
  if (row < 0 || row >= state.summary.groups.length || expert < 0 || expert >= state.summary.experts) return null;
  return { row, expert };
}

function describeCell({ row, expert }) {
  const rec = state.record;
  const group = state.summary.groups[row];
  const load = rec.load[row]?.[expert] ?? null;
  if (load === null) return `${group}, expert ${expert}: no value at step ${fmt(rec.step)}`;
  const share = (100 * load) / state.summary.experts;
  const parts = [`${group}, expert ${expert}: load ${load.toFixed(3)} x mean`,
    `${share.toPrecision(3)}% of the layer's slots`];
  const bias = rec.bias?.[row]?.[expert];
  if (bias !== undefined) parts.push(bias === null ? 'no bias' : `bias ${bias}`);
  const dead = load < state.summary.dead_fraction ? ` (dead: under ${state.summary.dead_fraction} x mean)` : '';
  return `${parts.join(', ')}${dead}`;
}

// -- the strip: MaxVio per layer over the run --------------------------------------------------------
function stripGeometry(canvas) {
  const m = state.strip;
  const rowHeight = Math.max(3, Math.min(12, Math.floor(320 / m.rows)));
  return { rowHeight, columnWidth: (canvas.width - LEFT) / m.columns, height: rowHeight * m.rows };
}

function drawStrip(canvas) {
  const m = state.strip;
  canvas.width = Math.max(document.body.clientWidth - 40, 500);
  const { rowHeight, columnWidth, height } = stripGeometry(canvas);
  canvas.height = height;
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  // Three image rows per layer: MaxVio's colour, then black through the middle where an expert was dead.
  const cells = cellImage(3 * m.rows, m.columns, (r, c) => {
    const v = m.max_violation[Math.floor(r / 3)][c];
    if (v === null) return NO_VALUE;
    return r % 3 === 1 && m.dead[Math.floor(r / 3)][c] ? DEAD : vioColour(v);
  });
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(cells, LEFT, 0, canvas.width - LEFT, height);
  rowLabels(ctx, state.summary.groups, rowHeight);
  const x = LEFT + (Math.floor(state.index / m.step_block) + 0.5) * columnWidth;
  ctx.fillStyle = '#1565c0';
  ctx.fillRect(x - 1, 0, 2, height);
  if (state.row !== null) {
    ctx.strokeStyle = '#1565c0';
    ctx.strokeRect(LEFT, state.row * rowHeight, canvas.width - LEFT, rowHeight);
  }
  canvas.dataset.drawn = `${m.rows}x${m.columns}`;
}

function stripCell(canvas, event) {
  const m = state.strip;
  const box = canvas.getBoundingClientRect();
  const { rowHeight, columnWidth } = stripGeometry(canvas);
  const row = Math.floor((event.clientY - box.top) / rowHeight);
  const column = Math.floor((event.clientX - box.left - LEFT) / columnWidth);
  if (row < 0 || row >= m.rows || column < 0 || column >= m.columns) return null;
  const first = column * m.step_block;
  const last = Math.min(first + m.step_block, m.records) - 1;
  return { row, column, first, last };
}

function describeStrip({ row, column, first, last }) {
  const m = state.strip;
  const group = state.summary.groups[row];
  const v = m.max_violation[row][column];
  const steps = first === last ? `step ${fmt(m.record_steps[first])}`
    : `steps ${fmt(m.record_steps[first])}..${fmt(m.record_steps[last])} (${last - first + 1} records, the largest)`;
  if (v === null) return `${group}, ${steps}: no value`;
  const dead = m.dead[row][column] ? `, ${plural(m.dead[row][column], 'dead expert')}` : '';
  return `${group}, ${steps}: MaxVio ${v.toFixed(3)}${dead}`;
}

// -- the lists ---------------------------------------------------------------------------------------
function deadText(dead, count) {
  const bySince = new Map();
  for (const { expert, since_step: since } of dead) bySince.set(since, [...(bySince.get(since) ?? []), expert]);
  const parts = [...bySince].map(([since, experts]) =>
    `${experts.length > 1 ? 'experts' : 'expert'} ${experts.join(', ')} dead since step ${fmt(since)}`);
  if (count > dead.length) parts.push(`${count - dead.length} more dead`);
  return parts.join('; ');
}

function atStepText(w) {
  const busiest = w.busiest[0];
  const hot = busiest ? ` (expert ${busiest.expert} at ${busiest.load.toFixed(2)}x the mean)` : '';
  const dead = w.dead.length ? `${deadText(w.dead, w.dead_count)}; ` : '';
  return `${w.layer}: ${dead}MaxVio ${w.max_violation.toFixed(2)}${hot}, least ${w.min_load.toFixed(2)}x`;
}

function overRunText(w) {
  const parts = [];
  if (w.dead_now.length) parts.push(deadText(w.dead_now, w.dead_now_count));
  for (const d of w.dead_before) {
    parts.push(`expert ${d.expert} dead in ${plural(d.records, 'record')} (steps ${fmt(d.first_step)}..${
      fmt(d.last_step)}), alive now`);
  }
  if (w.records_with_dead) parts.push(`${plural(w.records_with_dead, 'record')} with a dead expert`);
  if (w.mean_max_violation !== null) {
    parts.push(`MaxVio mean ${w.mean_max_violation.toFixed(2)}, peak ${w.peak_max_violation.toFixed(2)} at step ${
      fmt(w.peak_step)}`);
  }
  return `${w.layer}: ${parts.join('; ')}`;
}

function listItems(list, entries, text, onClick) {
  list.replaceChildren(...entries.map((w) => {
    const item = el('li', { textContent: text(w), style: 'cursor: pointer', onclick: () => onClick(w) });
    item.dataset.layer = w.layer;
    return item;
  }));
  if (!entries.length) list.append(el('li', { textContent: 'none' }));
}

// -- state changes ---------------------------------------------------------------------------------
function stepLabel(ui) {
  const steps = state.strip.record_steps;
  const s = state.summary;
  const reads = s.reads_per_record > 1 ? `, the mean of ${s.reads_per_record} reads` : '';
  ui.stepLabel.textContent = `step ${fmt(steps[state.index])} (record ${fmt(state.index + 1)} of ${
    fmt(steps.length)}${reads}, one every ${s.steps_per_read} steps)`;
}

// Fetch the record at the slider (one at a time: while dragging, only the latest position is fetched).
async function select(ui, index, params = {}) {
  state.index = Math.min(Math.max(index, 0), state.strip.records - 1);
  state.follow = state.index === state.strip.records - 1;
  ui.slider.value = String(state.index);
  stepLabel(ui);
  state.wanted = { step: state.strip.record_steps[state.index], ...params };
  if (state.loading) return;
  state.loading = true;
  try {
    while (state.wanted) {
      const wanted = state.wanted;
      state.wanted = null;
      const rec = await getJson('record', { run: state.run, ...wanted });
      const worst = await getJson('worst', { run: state.run, step: rec.step, limit: 8 });
      state.record = rec;
      if (rec.index !== state.index && !state.wanted) { // a strip click picked the block's worst record
        state.index = rec.index;
        ui.slider.value = String(rec.index);
        stepLabel(ui);
      }
      drawHeatmap(ui.heatmap);
      drawStrip(ui.strip);
      ui.atStepTitle.textContent = `At step ${fmt(rec.step)}`;
      listItems(ui.worstStep, worst.at_step, atStepText, (w) => highlight(ui, w.row));
      listItems(ui.worstRun, worst.over_run, overRunText, (w) => {
        state.row = w.row; // to where its dead experts died, else to its worst step
        goToStep(ui, w.dead_now[0]?.since_step ?? w.peak_step);
      });
    }
  } finally {
    state.loading = false;
  }
}

function goToStep(ui, step) {
  const index = state.strip.record_steps.findIndex((s) => s >= step);
  return select(ui, index < 0 ? state.strip.records - 1 : index);
}

function highlight(ui, row) {
  state.row = state.row === row ? null : row;
  drawHeatmap(ui.heatmap);
  drawStrip(ui.strip);
}

function setPlaying(ui, on) {
  clearInterval(state.playing);
  state.playing = null;
  ui.play.textContent = on ? 'pause' : 'play';
  if (!on) return;
  if (state.index >= state.strip.records - 1) select(ui, 0);
  state.playing = setInterval(() => {
    if (state.index >= state.strip.records - 1) setPlaying(ui, false);
    else if (!state.loading) select(ui, state.index + 1);
  }, PLAY_MS);
}

function legend(ui) {
  const s = state.summary;
  ui.legend.replaceChildren();
  const swatch = (background, width = 12) => el('span', {
    style: `display:inline-block;width:${width}px;height:12px;vertical-align:middle;background:${background}`,
  });
  const bar = swatch(`linear-gradient(to right, ${DIVERGING.map(css).join(', ')})`, 240);
  const top = state.record?.bias ? biasScale(state.record) : 1;
  const ends = state.channel === 'bias'
    ? [`${-top.toPrecision(2)}`, 'bias 0, the ends: 99% of |bias|', `+${top.toPrecision(2)}`]
    : [`${(1 / state.range).toFixed(2)}x`, 'the layer mean (1x)', `${state.range}x`];
  ui.legend.append(ends[0], ' ', bar, ' ', ends[2], ` (centre: ${ends[1]}${
    state.channel === 'bias' ? '' : ', log scale'}) `);
  if (state.channel === 'load') ui.legend.append(swatch(css(DEAD)), ` dead (under ${s.dead_fraction}x) `);
  ui.legend.append(swatch(css(NO_VALUE)), ' no value; right: MaxVio per layer and its dead experts');
}

async function refresh(ui) {
  const runs = await getJson('runs', {});
  if (!runs.length) {
    ui.info.textContent = 'No run under this logdir holds moe records.';
    return;
  }
  ui.runs.replaceChildren(...runs.map((r) => el('option', { value: r.run, textContent: r.run })));
  if (!runs.some((r) => r.run === state.run)) state.run = runs[0].run;
  ui.runs.value = state.run;
  const s = runs.find((r) => r.run === state.run);
  state.summary = s;
  ui.info.textContent = `${s.layers} MoE layers x ${s.experts} experts (top-${s.top_k}), ${fmt(s.records)} records, ${
    ''}steps ${fmt(s.first_step)}..${fmt(s.last_step)}`;
  ui.channels.style.display = s.channels.includes('bias') ? '' : 'none';
  if (!s.channels.includes('bias')) state.channel = 'load';
  const width = Math.max(document.body.clientWidth - 40 - LEFT, 200);
  state.strip = await getJson('strip', { run: state.run, max_steps: Math.min(width, 1024) });
  ui.slider.max = String(state.strip.records - 1);
  const block = state.strip.step_block;
  const blocks = block > 1 ? `blocks of ${block} records, each showing its largest; ` : '';
  ui.stripLegend.textContent = `colour: MaxVio (max load / mean - 1) from 0 (white) to ${vioHigh().toFixed(2)} ${
    ''}(dark red); black line: a dead expert; ${blocks}click a cell to show that step`;
  legend(ui);
  await select(ui, state.follow ? state.strip.records - 1 : state.index);
}

export async function render() {
  document.body.style.cssText = 'font: 13px sans-serif; margin: 16px; color: #212121;';
  const radio = (value, label) => el('label', {}, el('input', {
    type: 'radio', name: 'channel', value, checked: value === 'load',
  }), ` ${label} `);
  const ui = {
    runs: el('select'),
    info: el('span', { id: 'info' }),
    play: el('button', { id: 'play', textContent: 'play' }),
    latest: el('button', { id: 'latest', textContent: 'latest' }),
    slider: el('input', { id: 'slider', type: 'range', min: 0, max: 0, value: 0, style: 'width: 420px' }),
    stepLabel: el('span', { id: 'step' }),
    channels: el('span', { id: 'channels' }, 'colour: ', radio('load', 'load'), radio('bias', 'expert bias')),
    range: el('select', { id: 'range' }, ...[2, 4, 8].map((r) => el('option', { value: r, textContent: `${r}x` }))),
    rangeLabel: el('span'),
    heatmap: el('canvas', { id: 'heatmap' }),
    legend: el('div', { id: 'legend' }),
    strip: el('canvas', { id: 'strip' }),
    stripLegend: el('div', { id: 'strip-legend' }),
    tip: el('div', { id: 'tip' }),
    atStepTitle: el('h4', { textContent: 'At the step shown' }),
    worstStep: el('ol', { id: 'worst-step' }),
    worstRun: el('ol', { id: 'worst-run' }),
  };
  ui.tip.style.cssText = 'position: fixed; pointer-events: none; background: #fff; border: 1px solid #999;'
    + ' padding: 2px 6px; display: none;';
  ui.heatmap.style.cursor = 'crosshair';
  ui.strip.style.cursor = 'pointer';
  const lists = el('div', { style: 'display: flex; gap: 32px;' },
    el('div', { style: 'flex: 1' }, ui.atStepTitle, ui.worstStep),
    el('div', { style: 'flex: 1' }, el('h4', { textContent: 'Over the run' }), ui.worstRun));
  document.body.append(
    el('div', {}, 'Run ', ui.runs, ' ', ui.info),
    el('h3', { textContent: 'Expert load: MoE layers (rows) x routed experts, one record' }),
    el('div', {}, ui.play, ' ', ui.latest, ' ', ui.slider, ' ', ui.stepLabel),
    el('div', {}, ui.channels, ui.rangeLabel),
    ui.heatmap, ui.legend,
    el('h3', { textContent: 'Balance over the run: MaxVio per layer x step' }), ui.strip, ui.stripLegend,
    el('h3', { textContent: 'Worst layers and dead experts' }), lists, ui.tip,
  );
  ui.rangeLabel.append(' · load scale ', ui.range);
  const redraw = () => {
    ui.rangeLabel.style.display = state.channel === 'bias' ? 'none' : '';
    legend(ui);
    if (state.record) drawHeatmap(ui.heatmap);
  };
  ui.runs.addEventListener('change', () => {
    Object.assign(state, { run: ui.runs.value, follow: true, row: null });
    refresh(ui);
  });
  ui.channels.addEventListener('change', (event) => { state.channel = event.target.value; redraw(); });
  ui.range.addEventListener('change', () => { state.range = Number(ui.range.value); redraw(); });
  ui.slider.addEventListener('input', () => select(ui, Number(ui.slider.value)));
  ui.play.addEventListener('click', () => setPlaying(ui, state.playing === null));
  ui.latest.addEventListener('click', () => { setPlaying(ui, false); select(ui, state.strip.records - 1); });
  const hover = (canvas, find, describe) => {
    canvas.addEventListener('mousemove', (event) => {
      const cell = state.record && find(canvas, event);
      ui.tip.style.display = cell ? 'block' : 'none';
      if (!cell) return;
      ui.tip.textContent = describe(cell);
      ui.tip.style.left = `${event.clientX + 12}px`;
      ui.tip.style.top = `${event.clientY + 12}px`;
    });
    canvas.addEventListener('mouseleave', () => { ui.tip.style.display = 'none'; });
  };
  hover(ui.heatmap, heatmapCell, describeCell);
  hover(ui.strip, stripCell, describeStrip);
  ui.strip.addEventListener('click', (event) => {
    const cell = state.strip && stripCell(ui.strip, event);
    if (!cell) return;
    setPlaying(ui, false);
    state.row = cell.row; // a block of several records: the server picks the one where this layer was worst
    const params = { until: state.strip.record_steps[cell.last], layer: state.summary.groups[cell.row] };
    select(ui, cell.first, cell.first === cell.last ? {} : params);
  });
  ui.info.textContent = 'Reading the records...'; // the first read of a large run takes seconds
  const update = () => refresh(ui).catch((error) => { ui.info.textContent = String(error); });
  await update();
  setInterval(() => { if (state.playing === null) update(); }, 30000); // new records arrive while a job trains
}
