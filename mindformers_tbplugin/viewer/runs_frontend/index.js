// The runs dashboard: one self-contained ES module, loaded by TensorBoard in the plugin's iframe.
// The table comes from this plugin's /table route (relative URL: the iframe's base is /data/plugin/runs/);
// each run links to TensorBoard's time series dashboard filtered to that run (the runFilter query
// parameter, a regular expression over run names). No library, no network beyond this TensorBoard.

const SHOWN = 2000; // rows drawn at once; filters narrow the rest
const COLUMNS = [
  ['run', 'run'], ['experiment', 'experiment'], ['owner', 'owner'], ['hosts', null], ['world', null],
  ['started', 'start'], ['duration', 'duration'], ['state', 'state'], ['step', 'step'], ['loss', 'loss'],
  ['tok/s/dev', 'tokens'], ['MFU', 'mfu'], ['alerts', 'alerts'], ['incident', null],
];
const STATES = ['starting', 'running', 'stale', 'failed', 'stopped by alert', 'finished', 'unknown', 'unreadable'];
const COLOURS = { starting: '#1565c0', running: '#1b5e20', stale: '#e65100', failed: '#b71c1c', 'stopped by alert': '#b71c1c' };
const state = { rows: [], sort: 'start', reverse: false };

const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};
const dash = '-';
const number = (v, digits) => (v === null || v === undefined ? dash : Number(v.toPrecision(digits)).toString());

function duration(seconds) {
  if (seconds === null || seconds === undefined) return dash;
  const s = Math.max(Math.floor(seconds), 0);
  const [d, h, m] = [Math.floor(s / 86400), Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60)];
  const two = (n) => String(n).padStart(2, '0');
  if (d) return `${d}d${two(h)}h`;
  if (h) return `${h}h${two(m)}m`;
  return `${m}m${two(s % 60)}s`;
}

const started = (t) => (t === null || t === undefined ? dash
  : new Date(t * 1000).toLocaleString('sv-SE').slice(0, 16));

// TensorBoard's charts of one run: its root page with runFilter=^<run, regex-escaped>$.
export function chartsUrl(run, base = document.baseURI) {
  const escaped = run.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  const root = new URL('../../../', base);
  return `${root.href}?${new URLSearchParams({ runFilter: `^${escaped}$` })}#timeseries`;
}

function cells(row) {
  const hosts = row.hosts.length ? row.hosts[0] + (row.host_count > 1 ? ` +${row.host_count - 1}` : '') : dash;
  let step = row.step === null ? dash : String(row.step);
  if (row.total_steps !== null) step += `/${row.total_steps}`;
  let alerts = row.alerts === null ? dash : String(row.alerts);
  if (row.alert_rules.length) alerts += ` (${row.alert_rules.join(', ')})`;
  return [
    row.experiment || dash, row.owner || dash, hosts, row.world_size ?? dash, started(row.started),
    duration(row.duration), row.state, step, number(row.loss, 5), number(row.tokens_per_s_per_device, 4),
    row.mfu === null ? dash : `${(100 * row.mfu).toFixed(1)}%`, alerts, row.last_incident_step ?? dash,
  ];
}

const LAST = Infinity;
const KEYS = {
  start: (r) => -(r.started ?? -LAST), run: (r) => r.run, experiment: (r) => r.experiment, owner: (r) => r.owner,
  state: (r) => STATES.indexOf(r.state), step: (r) => -(r.step ?? -LAST), loss: (r) => r.loss ?? LAST,
  duration: (r) => -(r.duration ?? -LAST), tokens: (r) => -(r.tokens_per_s_per_device ?? -LAST),
  mfu: (r) => -(r.mfu ?? -LAST), alerts: (r) => -(r.alerts ?? -LAST),
};

function chosen(ui) {
  const wanted = ui.state.value;
  const text = ui.filter.value.trim().toLowerCase();
  const rows = state.rows.filter((r) => (!wanted || r.state === wanted)
    && (!text || `${r.run} ${r.experiment} ${r.owner}`.toLowerCase().includes(text)));
  const key = KEYS[state.sort];
  rows.sort((a, b) => {
    const [x, y] = [key(a), key(b)];
    const order = x < y ? -1 : x > y ? 1 : 0;
    return state.reverse ? -order : order;
  });
  return rows;
}

function draw(ui) {
  const rows = chosen(ui);
  const body = el('tbody');
  for (const row of rows.slice(0, SHOWN)) {
    const link = el('a', { href: chartsUrl(row.run), target: '_top', textContent: row.run, className: 'run' });
    const tr = el('tr', { className: 'row' }, el('td', {}, link),
      ...cells(row).map((text) => el('td', { textContent: String(text) })));
    tr.dataset.run = row.run;
    tr.children[7].style.color = COLOURS[row.state] ?? '';
    tr.title = row.problem || row.detail || '';
    body.append(tr);
  }
  ui.table.replaceChild(body, ui.table.tBodies[0]);
  const more = rows.length > SHOWN ? `; the first ${SHOWN.toLocaleString('en-US')} drawn (filter to see others)` : '';
  ui.count.textContent = `${rows.length.toLocaleString('en-US')} of ${state.rows.length.toLocaleString('en-US')} runs${more}`;
}

async function refresh(ui) {
  const response = await fetch(`./table?${new URLSearchParams({ stale_after: ui.staleAfter.value })}`);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  state.rows = body.rows;
  ui.info.textContent = `${body.root}: read in ${body.read_s.toFixed(2)} s, stale after ${body.stale_after} s`;
  draw(ui);
}

export async function render() {
  document.body.style.cssText = 'font: 13px sans-serif; margin: 16px; color: #212121;';
  const ui = {
    state: el('select', { id: 'state' }, el('option', { value: '', textContent: 'every state' }),
      ...STATES.map((s) => el('option', { value: s, textContent: s }))),
    filter: el('input', { id: 'filter', placeholder: 'run, experiment or owner contains' }),
    staleAfter: el('input', { id: 'stale-after', type: 'number', min: 1, value: 300, style: 'width: 6em' }),
    count: el('span', { id: 'count' }),
    info: el('div', { id: 'info', style: 'color: #616161; margin: 4px 0;' }),
    table: el('table', { id: 'runs', style: 'border-collapse: collapse; white-space: nowrap;' }),
  };
  const head = el('tr');
  for (const [label, key] of COLUMNS) {
    const th = el('th', { textContent: label, style: 'text-align: left; padding: 2px 8px;' });
    if (key) {
      th.style.cursor = 'pointer';
      th.addEventListener('click', () => {
        state.reverse = state.sort === key ? !state.reverse : false;
        state.sort = key;
        draw(ui);
      });
    }
    head.append(th);
  }
  ui.table.append(el('thead', {}, head), el('tbody'));
  const style = el('style', { textContent: 'td { padding: 2px 8px; } tr.row:nth-child(odd) { background: #f5f5f5; }' });
  document.head.append(style);
  document.body.append(
    el('div', {}, 'State ', ui.state, ' ', ui.filter, ' stale after ', ui.staleAfter, ' s · ', ui.count),
    ui.info, ui.table,
  );
  const update = () => refresh(ui).catch((error) => { ui.info.textContent = String(error); });
  ui.state.addEventListener('change', () => draw(ui));
  ui.filter.addEventListener('input', () => draw(ui));
  ui.staleAfter.addEventListener('change', update);
  await update();
  setInterval(update, 30000); // runs start, advance and end while the page is open
}
