// actmem's web page: the form -> one JSON request -> the engine (actmem_web.wasm, web/actmem_web.cc)
// -> the CLI's JSON text -> cards, charts and tables. The page computes no memory itself: every byte
// shown is read from the JSON the engine returns (the same text `actmem estimate --json` prints).
'use strict';

const GiB = 1024 ** 3;
const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const form = $('#form');

// Form fields -> the engine's option names (the CLI's flags with '_' for '-'). Serving's fields have
// their own names in the form (and the URL) where training has one of the same name.
const TRAIN_FIELDS = {
  seq_len: 'int', micro_batch: 'int', dtype: 'text', framework: 'text', attention: 'text', recompute: 'text',
  hidden_dropout: 'real', attention_dropout: 'real', dp: 'int', tp: 'int', pp: 'int', vpp: 'int', cp: 'int',
  ep: 'int', num_micro_batches: 'int', zero: 'int', sp: 'flag', offload_optimizer: 'flag', optimizer: 'text',
  weight_dtype: 'text', recompute_layers: 'int', first_stage_layers: 'int', last_stage_layers: 'int',
};
// The rest of the engine's training options (its option table) join TRAIN_FIELDS when the form is
// built: buildOptionFields().
const SERVE_FIELDS = {
  context_len: ['context_len', 'int'], batch: ['batch', 'int'], serve_tp: ['tp', 'int'], kv_dtype: ['kv_dtype', 'text'],
  serve_weight_dtype: ['weight_dtype', 'text'], serve_dtype: ['dtype', 'text'], serve_gpu: ['gpu', 'text'],
  gpu_memory_utilization: ['gpu_memory_utilization', 'real'],
};
const CONFIG = '__config__';
const DEFAULT_MODEL = 'llama-3-8b';

let engine = null;
let tab = 'train';
const charts = {};
window.actmemCharts = charts;  // for the browser test (tests/web/web_test.py): the bars it adds up
const state = { defaults: {}, lastGood: {} };
window.actmemTimings = [];  // per update: {tab, engine_ms, render_ms, total_ms}

// ---- form state <-> URL ----------------------------------------------------------------------------

function fieldValue(el) {
  if (el.type === 'checkbox') return el.checked ? '1' : '';
  return el.value;
}
function setField(el, v) {
  if (el.type === 'checkbox') el.checked = v === '1' || v === 'true';
  else el.value = v;
}
function formFields() {
  return $$('input[name], select[name], textarea[name]', form);
}
function readState() {
  const s = {};
  for (const el of formFields()) s[el.name] = fieldValue(el);
  return s;
}
// Base64 of UTF-8 text, URL-safe (a pasted config.json travels in the URL).
function b64encode(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}
function b64decode(s) {
  const bin = atob(s.replace(/-/g, '+').replace(/_/g, '/'));
  return new TextDecoder().decode(Uint8Array.from(bin, c => c.charCodeAt(0)));
}
function writeUrl() {
  const s = readState();
  const q = new URLSearchParams();
  if (tab !== 'train') q.set('tab', tab);
  for (const [k, v] of Object.entries(s)) {
    if (k === 'config') continue;
    if (v !== state.defaults[k]) q.set(k, v);
  }
  if (s.model === CONFIG && s.config) q.set('config', b64encode(s.config));
  const name = state.configName && s.model === CONFIG ? state.configName : null;
  if (name && name !== 'config.json') q.set('config_name', name);
  const url = `${location.pathname}${q.toString() ? '?' + q.toString() : ''}`;
  history.replaceState(null, '', url);
}
function applyQuery(search) {
  const q = new URLSearchParams(search);
  for (const el of formFields()) {
    if (el.name === 'config') continue;
    if (q.has(el.name)) setField(el, q.get(el.name));
    else setField(el, state.defaults[el.name] ?? '');
  }
  $('#f-config').value = '';
  state.configName = q.get('config_name') || 'config.json';
  if (q.has('config')) {
    try { $('#f-config').value = b64decode(q.get('config')); } catch (e) { $('#f-config').value = ''; }
  }
  setTab(q.get('tab') || 'train', false);
  syncModel();
}

// ---- requests ---------------------------------------------------------------------------------------

function modelPart(s) {
  if (s.model === CONFIG) return { config: s.config || '', config_name: state.configName || 'config.json' };
  return { model: s.model };
}
function typed(kind, v) {
  if (kind === 'flag') return v === '1';
  if (kind === 'switch') return v === '1' ? true : null;  // a table flag: sent only when ticked
  if (v === '' || v === undefined) return null;  // unset: the engine's default (dropout: config.json's)
  if (kind === 'int') return /^-?\d+$/.test(v.trim()) ? parseInt(v, 10) : v;  // text: the engine names the error
  if (kind === 'real') return isFinite(Number(v)) ? Number(v) : v;
  return v;
}
function trainRequest(s, sweep) {
  const options = {};
  for (const [name, kind] of Object.entries(TRAIN_FIELDS)) options[name] = typed(kind, s[name]);
  const r = { ...modelPart(s), options, sweep };
  if (s.gpu) r.gpu = s.gpu;
  return r;
}
function serveRequest(s) {
  const options = {};
  for (const [field, [name, kind]] of Object.entries(SERVE_FIELDS)) {
    const v = typed(kind, s[field]);
    if (v !== null && !(name === 'gpu' && v === '')) options[name] = v;
  }
  return { ...modelPart(s), options, sweep: true };
}
function planRequest(s) {
  const r = trainRequest(s, false);
  r.gpus = typed('int', s.gpus);
  r.global_batch = typed('int', s.global_batch);
  return r;
}
function call(fn, request) {
  const t0 = performance.now();
  let out;
  try {
    out = JSON.parse(engine[fn](JSON.stringify(request)));
  } catch (e) {
    out = { ok: false, field: '', message: `the engine failed: ${e && e.message ? e.message : e}` };
  }
  out.engine_ms = performance.now() - t0;
  return out;
}

// The CLI command that prints the same JSON (shown above the JSON; the browser test runs it).
function cliArgs(s, kind) {
  const model = s.model === CONFIG ? (state.configName || 'config.json') : s.model;
  const a = [kind, '--model', model];
  if (kind === 'serve') {
    for (const [field, [name, kind2]] of Object.entries(SERVE_FIELDS)) {
      if (kind2 === 'switch') { if (s[field] === '1') a.push('--' + name.replace(/_/g, '-')); continue; }
      if (s[field] !== '' && s[field] !== undefined) a.push('--' + name.replace(/_/g, '-'), s[field]);
    }
  } else {
    for (const [name, kind2] of Object.entries(TRAIN_FIELDS)) {
      const v = s[name];
      if (kind2 === 'flag') { if (v === '1') a.push('--' + name.replace(/_/g, '-')); continue; }
      if (v === '' || v === state.defaults[name]) continue;
      a.push('--' + name.replace(/_/g, '-'), v);
    }
    if (s.gpu) a.push('--gpu', s.gpu);
    if (kind === 'plan') a.push('--gpus', s.gpus, '--global-batch', s.global_batch);
  }
  a.push('--json');
  return a;
}

// ---- errors -----------------------------------------------------------------------------------------

function clearErrors() {
  for (const el of $$('.err', form)) { el.textContent = ''; el.classList.remove('on'); }
  for (const el of $$('.bad', form)) el.classList.remove('bad');
}
function showError(field, message, fieldMap = {}) {
  const name = fieldMap[field] || field || 'model';
  let box = $$('.err', form).find(b => b.dataset.for.split(' ').includes(name) && b.closest('fieldset').offsetParent !== null);
  if (!box) box = $$('.err', form).find(b => b.dataset.for.split(' ').includes('model'));
  box.textContent = message;
  box.classList.add('on');
  const input = $(`[name="${name}"]`, form);
  if (input) input.classList.add('bad');
  $('#results').classList.add('stale');
}

// ---- formatting -------------------------------------------------------------------------------------

const gib = b => (b / GiB).toFixed(2);
const group = n => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
function esc(s) {
  return String(s).replace(/[&<>"]/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
}
function card(label, value, sub, cls = '') {
  return `<div class="card ${cls}"><div class="label">${esc(label)}</div><div class="value">${value}</div>` +
         `<div class="sub">${sub}</div></div>`;
}
function seqLabel(n) { return n >= 1024 ? `${n / 1024}k` : String(n); }

// ---- charts -----------------------------------------------------------------------------------------

const COLORS = {
  weights: '#4e79a7', gradients: '#f28e2b', optimizer: '#e15759', activations: '#76b7b2', transient: '#59a14f',
  fp8_weight_cache: '#9c755f', workspaces: '#edc948',
  reserve: '#b07aa1', allowances: '#bab0ac', none: '#e15759', selective: '#f28e2b', full: '#4e79a7', capacity: '#222',
};
Chart.defaults.animation = false;
Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
Chart.defaults.font.size = 11;
Chart.defaults.maintainAspectRatio = false;

// The GPU's capacity as a dashed horizontal line across the plot, labelled (options.plugins.capacity:
// {value, label}); a line dataset would vanish on a chart of one bar.
const capacityLine = {
  id: 'capacity',
  afterDatasetsDraw(c, _, opts) {
    if (!opts || !(opts.value > 0)) return;
    const y = c.scales.y.getPixelForValue(opts.value);
    if (!(y >= c.chartArea.top && y <= c.chartArea.bottom)) return;
    const ctx = c.ctx;
    ctx.save();
    ctx.strokeStyle = COLORS.capacity;
    ctx.setLineDash([6, 4]);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(c.chartArea.left, y);
    ctx.lineTo(c.chartArea.right, y);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.font = '11px ' + Chart.defaults.font.family;
    ctx.textAlign = 'right';
    const w = ctx.measureText(opts.label).width;
    ctx.fillStyle = 'rgba(255, 255, 255, 0.85)';
    ctx.fillRect(c.chartArea.right - w - 8, y - 16, w + 6, 14);
    ctx.fillStyle = COLORS.capacity;
    ctx.fillText(opts.label, c.chartArea.right - 5, y - 5);
    ctx.restore();
  },
};
Chart.register(capacityLine);
const capacity = j => j.fit ? { value: j.fit.capacity_bytes / GiB, label: `${j.fit.gpu}: ${gib(j.fit.capacity_bytes)} GiB` } : { value: 0 };

function chart(id, config) {
  if (charts[id]) {
    charts[id].data = config.data;
    charts[id].options = config.options;
    charts[id].update('none');
  } else {
    charts[id] = new Chart($('#' + id), config);
  }
}
const gibTicks = { callback: v => `${Math.round(v * 10) / 10}` };

function stackChart(j, out) {
  const stages = out.stages.length ? out.stages : [{
    weights: j.memory.weights_bytes, gradients: j.memory.gradients_bytes, optimizer: j.memory.optimizer_bytes,
    activations: j.memory.activations_bytes, transient: j.memory.transient_bytes,
    workspaces: j.memory.workspaces_bytes ?? 0, fp8_weight_cache: 0,
  }];
  const labels = stages.map((_, i) => stages.length > 1 ? `stage ${i}${i === out.peak_stage ? ' (peak)' : ''}` : 'per GPU');
  // Every part of a stage's total (StageTotals::total): the bars add up to the peak.
  const parts = ['weights', 'gradients', 'optimizer', 'fp8_weight_cache', 'workspaces', 'activations', 'transient'];
  const datasets = parts.map(p => ({
    label: p.replace(/_/g, ' '), data: stages.map(s => s[p] / GiB), backgroundColor: COLORS[p], stack: 'm', order: 2,
  }));
  datasets.push({ label: 'reserve', data: stages.map(() => j.memory.reserve_bytes / GiB), backgroundColor: COLORS.reserve, stack: 'm', order: 2 });
  if (j.fit) {
    datasets.push({ label: 'allowances', data: stages.map(s => (s.allowance ?? j.fit.allowance_bytes) / GiB),
                    backgroundColor: COLORS.allowances, stack: 'm', order: 2 });
  }
  $('#stage-caption').textContent = stages.length > 1 ? ` by pipeline stage (GiB)` : ' (GiB)';
  chart('chart-stack', {
    type: 'bar', data: { labels, datasets: datasets.filter(d => d.type === 'line' || d.data.some(x => x > 0)) },
    options: { scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: 'GiB' }, ticks: gibTicks,
                                                   suggestedMax: j.fit ? 1.08 * j.fit.capacity_bytes / GiB : undefined } },
               plugins: { legend: { position: 'bottom', labels: { boxWidth: 10 } }, capacity: capacity(j) } },
  });
}

function sweepChart(id, xs, series, j, current, xname) {
  const datasets = ['none', 'selective', 'full'].map(r => ({
    label: `recompute ${r}`, data: series[r].map(p => p ? p.needed / GiB : null), borderColor: COLORS[r],
    backgroundColor: COLORS[r], pointRadius: xs.map(x => x === current ? 4 : 2), spanGaps: false, borderWidth: 2,
  }));
  chart(id, {
    type: 'line', data: { labels: xs.map(x => xname === 'seq' ? seqLabel(x) : String(x)), datasets },
    options: {
      scales: { y: { type: 'logarithmic', suggestedMax: j.fit ? 1.5 * j.fit.capacity_bytes / GiB : undefined, title: { display: true, text: j.fit ? 'GiB needed' : 'GiB peak' },
                     ticks: { callback: v => { const l = Math.log10(v); return Math.abs(l - Math.round(l)) < 1e-9 || [2, 5].includes(Math.round(v / 10 ** Math.floor(l))) ? `${v}` : ''; } } },
                x: { title: { display: true, text: xname === 'seq' ? 'sequence length' : 'micro-batch' } } },
      plugins: { legend: { position: 'bottom', labels: { boxWidth: 10 } }, capacity: capacity(j) },
    },
  });
}

// ---- training ---------------------------------------------------------------------------------------

function renderTrain(out, s) {
  const j = JSON.parse(out.json);
  $('#json-estimate').textContent = out.json;
  $('#cli-estimate').textContent = 'actmem ' + cliArgs(s, 'estimate').join(' ');
  const m = j.memory;
  let cards = card('Peak per GPU', `${gib(m.total_bytes)} GiB`, `${group(m.total_bytes)} B · stage ${m.pipeline_stage}`, 'main');
  if (j.fit) {
    const f = j.fit;
    cards += card(f.fits ? 'Fits' : 'Does not fit', `${gib(f.headroom_bytes)} GiB`,
                  `headroom of ${gib(f.capacity_bytes)} GiB (${esc(f.gpu)}); needs ${gib(f.needed_bytes)} GiB with allowances`,
                  f.fits ? 'ok' : 'bad');
  }
  cards += card('Activations', `${gib(m.activations_bytes)} GiB`, `${gib(j.activations.per_layer_bytes)} GiB per layer`);
  cards += card('Weights + grads + optimizer', `${gib(m.static_bytes)} GiB`, `${group(j.params.per_gpu)} params on this GPU`);
  if (j.fit && !j.fit.fits && j.fit.changes && j.fit.changes.length)
    cards += card('What to change', esc(j.fit.changes[0].flags), j.fit.changes[0].fits ? `then it fits; step time ${j.fit.changes[0].time_cost >= 0 ? '+' : ''}${(100 * j.fit.changes[0].time_cost).toFixed(1)}%` : 'still does not fit', 'text');
  $('#train-cards').innerHTML = cards;

  stackChart(j, out);
  if (out.sweep) {
    sweepChart('chart-seq', out.sweep.seq_len, out.sweep.by_seq_len, j, j.inputs.seq_len, 'seq');
    sweepChart('chart-mb', out.sweep.micro_batch, out.sweep.by_micro_batch, j, j.inputs.micro_batch, 'mb');
  }

  const terms = [...m.terms, ...j.activations.terms.map(t => ({ ...t, label: '  ' + t.label })), ...j.transients];
  $('#terms').innerHTML = '<tr><th>term</th><th>formula</th><th>values</th><th class="n">bytes</th><th class="n">GiB</th></tr>' +
    terms.map(t => `<tr><td>${esc(t.label)}</td><td class="f">${esc(t.formula)}</td><td class="f">${esc(t.substituted)}</td>` +
                   `<td class="n">${group(t.bytes)}</td><td class="n">${gib(t.bytes)}</td></tr>`).join('');

  const regions = ['layer', 'embedding', 'shared', 'head'];
  const rows = [];
  for (const region of regions) {
    const list = j.activations.tensors.filter(t => t.region === region);
    if (!list.length) continue;
    rows.push(`<tr class="group"><td colspan="6">[${region}]</td></tr>`);
    for (const t of list) {
      const prod = t.shape.reduce((a, d) => a * d.value, 1);
      const coef = prod > 0 && t.bytes % prod === 0 ? t.bytes / prod : null;
      const values = coef !== null ? [coef, ...t.shape.map(d => d.value)].join(' × ') : t.shape.map(d => `${d.symbol}=${d.value}`).join(' ');
      rows.push(`<tr><td>${esc(t.name)}</td><td>${esc(t.op)}</td><td>${esc(t.dtype)}</td><td class="f">${esc(t.formula)}</td>` +
                `<td class="f">${esc(values)}</td><td class="n">${group(t.bytes)}</td></tr>`);
    }
  }
  $('#tensors').innerHTML = '<tr><th>tensor</th><th>op</th><th>dtype</th><th>formula</th><th>values</th><th class="n">bytes</th></tr>' + rows.join('');
}

// ---- serving ----------------------------------------------------------------------------------------

function renderServe(out, s) {
  const j = JSON.parse(out.json);
  $('#json-serve').textContent = out.json;
  $('#cli-serve').textContent = 'actmem ' + cliArgs(s, 'serve').join(' ');
  const m = j.memory;
  let cards = card('Per GPU', `${gib(m.total_bytes)} GiB`, `${group(m.total_bytes)} B`, 'main');
  cards += card('KV cache', `${gib(m.kv_cache_bytes)} GiB`, `${group(j.kv_cache.per_token_bytes)} B per token`);
  cards += card('Weights', `${gib(m.weights_bytes)} GiB`, `${esc(j.weight_dtype)}`);
  if (j.capacity) {
    const c = j.capacity;
    cards += card(c.fits ? 'Fits' : 'Does not fit', `${group(c.max_sequences)}`,
                  `sequences of ${group(j.context_len)} tokens at once on ${esc(c.gpu)}; KV budget ${gib(c.kv_budget_bytes)} GiB`,
                  c.fits ? 'ok' : 'bad');
  }
  $('#serve-cards').innerHTML = cards;
  const sw = out.sweep;
  const datasets = [{ type: 'bar', label: 'KV cache (GiB)', data: sw.kv_bytes.map(b => b / GiB), backgroundColor: '#9fd0cc',
                      yAxisID: 'y', order: 2 }];
  if (j.capacity) datasets.push({ type: 'line', label: 'sequences that fit', data: sw.max_sequences, borderColor: '#e15759',
                                  backgroundColor: '#e15759', yAxisID: 'y2', borderWidth: 2, order: 1 });
  chart('chart-kv', {
    type: 'bar', data: { labels: sw.context_len.map(seqLabel), datasets },
    options: { scales: { y: { type: 'logarithmic', position: 'left', title: { display: true, text: 'GiB KV cache' } },
                         y2: { display: !!j.capacity, type: 'logarithmic', position: 'right', grid: { drawOnChartArea: false },
                               title: { display: true, text: 'concurrent sequences' } },
                         x: { title: { display: true, text: 'context length' } } },
               plugins: { legend: { position: 'bottom', labels: { boxWidth: 10 } }, capacity: { value: 0 } } },
  });
  const terms = [...m.terms, ...(j.capacity ? j.capacity.terms : [])];
  $('#serve-terms').innerHTML = '<tr><th>term</th><th>formula</th><th>values</th><th class="n">bytes</th><th class="n">GiB</th></tr>' +
    terms.map(t => `<tr><td>${esc(t.label)}</td><td class="f">${esc(t.formula)}</td><td class="f">${esc(t.substituted)}</td>` +
                   `<td class="n">${group(t.bytes)}</td><td class="n">${gib(t.bytes)}</td></tr>`).join('');
}

// ---- planner ----------------------------------------------------------------------------------------

function layoutQuery(s, row) {
  const next = { ...s, tp: row.tp, pp: row.pp, vpp: row.vpp, cp: row.cp, ep: row.ep, dp: row.dp, zero: row.zero,
                 recompute: row.recompute, micro_batch: row.micro_batch, num_micro_batches: row.num_micro_batches,
                 sp: row.sp ? '1' : '', offload_optimizer: row.offload_optimizer ? '1' : '',
                 recompute_layers: row.recompute_layers >= 0 ? row.recompute_layers : '',
                 first_stage_layers: row.first_stage_layers || '', last_stage_layers: row.last_stage_layers || '' };
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(next)) if (k !== 'config' && String(v) !== state.defaults[k]) q.set(k, String(v));
  if (s.model === CONFIG && s.config) q.set('config', b64encode(s.config));
  return '?' + q.toString();
}
function renderPlan(out, s) {
  const j = JSON.parse(out.json).plan;
  $('#json-plan').textContent = out.json;
  $('#cli-plan').textContent = 'actmem ' + cliArgs(s, 'plan').join(' ');
  $('#plan-cards').innerHTML = card('Layouts', group(j.fitting), `fit of ${group(j.valid)} valid, ${group(j.searched)} searched in ${j.search_ms.toFixed(1)} ms`, 'main') +
    (j.layouts.length ? card('Fastest', `${j.layouts[0].step_time_s.toFixed(3)} s`, `per step; MFU ${(100 * j.layouts[0].mfu).toFixed(1)}%`) : '');
  const rows = j.layouts.map((l, i) => `<tr><td>${i + 1}</td><td><a class="layout" href="${esc(layoutQuery(s, l))}">` +
    `tp${l.tp}${l.sp ? '+sp' : ''} pp${l.pp}${l.vpp > 1 ? 'x' + l.vpp : ''}` +
    `${l.first_stage_layers || l.last_stage_layers ? `(${l.first_stage_layers || '='}/${l.last_stage_layers || '='})` : ''}${l.cp > 1 ? ' cp' + l.cp : ''}${l.ep > 1 ? ' ep' + l.ep : ''} dp${l.dp}</a></td>` +
    `<td>${l.zero}${l.offload_optimizer ? '+off' : ''}</td><td>${l.recompute}${l.recompute_layers >= 0 ? ' ' + l.recompute_layers : ''}</td><td>${l.micro_batch}×${l.num_micro_batches}</td>` +
    `<td class="n">${gib(l.needed_bytes)}</td><td class="n">${gib(l.headroom_bytes)}</td><td class="n">${l.step_time_s.toFixed(3)}</td>` +
    `<td class="n">${Math.round(l.tokens_per_s_per_gpu)}</td><td class="n">${(100 * l.mfu).toFixed(1)}%</td><td>${esc(l.dominant_memory)}</td></tr>`);
  $('#plan-table').innerHTML = '<tr><th>#</th><th>layout (opens it)</th><th>ZeRO</th><th>recompute</th><th>b×m</th><th class="n">GiB</th>' +
    '<th class="n">free</th><th class="n">step s</th><th class="n">tok/s</th><th class="n">MFU</th><th>mostly</th></tr>' +
    (rows.length ? rows.join('') : '<tr><td colspan="11">nothing fits' + (j.closest ? `; the closest needs ${gib(j.closest.needed_bytes)} GiB` : '') + '</td></tr>');
}

// ---- update -----------------------------------------------------------------------------------------

const SERVE_ERROR_FIELDS = { tp: 'serve_tp', weight_dtype: 'serve_weight_dtype', dtype: 'serve_dtype', gpu: 'serve_gpu' };

function update() {
  if (!engine) return;
  const t0 = performance.now();
  const s = readState();
  writeUrl();
  clearErrors();
  let out;
  if (tab === 'serve') {
    out = call('serve', serveRequest(s));
    if (out.ok) renderServe(out, s); else showError(out.field, out.message, SERVE_ERROR_FIELDS);
  } else if (tab === 'plan') {
    out = call('plan', planRequest(s));
    if (out.ok) renderPlan(out, s); else showError(out.field, out.message);
  } else {
    out = call('estimate', trainRequest(s, true));
    if (out.ok) renderTrain(out, s); else showError(out.field, out.message);
  }
  if (out.ok) $('#results').classList.remove('stale');
  const total = performance.now() - t0;
  const t = { tab, model: s.model === CONFIG ? state.configName : s.model, ok: out.ok, engine_ms: out.engine_ms, render_ms: total - out.engine_ms, total_ms: total };
  window.actmemTimings.push(t);
  $('#timing').textContent = `computed in ${out.engine_ms.toFixed(1)} ms, drawn in ${(total - out.engine_ms).toFixed(1)} ms`;
  document.body.dataset.updates = String(window.actmemTimings.length);
}

function setTab(name, run = true) {
  tab = ['train', 'serve', 'plan'].includes(name) ? name : 'train';
  document.body.dataset.tab = tab;
  for (const b of $$('.tabs button')) b.setAttribute('aria-selected', String(b.dataset.tab === tab));
  if (run) update();
}

function syncModel() {
  $('#config-box').hidden = $('#f-model').value !== CONFIG;
}

// ---- the form's other training options, from the engine's option table ------------------------------

const optionHelp = text => text.replace(/@([a-z][a-z0-9_]*)/g, (_, name) => name);
const FIELD_KINDS = { count: 'int', real: 'real', flag: 'switch', text: 'text', size: 'text' };

function optionField(o) {
  const label = esc(o.name.replace(/_/g, ' '));
  const title = esc(optionHelp(o.help) + (o.choices ? `: ${o.choices}` : '') +
    (o.frameworks.length < 3 ? ` (${o.frameworks.join(', ')})` : ''));
  if (o.kind === 'flag') return `<label class="check" title="${title}"><input name="${o.name}" type="checkbox"> ${label}</label>`;
  const names = o.choices ? o.choices.split(', ') : [];
  const hint = esc(optionHelp(o.default_text));
  if (o.kind === 'text' && names.length && names.every(n => /^[\w.-]+$/.test(n)))
    return `<label title="${title}">${label} <select name="${o.name}"><option value="">${hint}</option>` +
      names.map(n => `<option>${esc(n)}</option>`).join('') + '</select></label>';
  const number = o.kind === 'count' || o.kind === 'real';
  const range = (o.min !== null ? ` min="${o.min}"` : '') + (o.max !== null ? ` max="${o.max}"` : '');
  return `<label title="${title}">${label} <input name="${o.name}" ${number ? `type="number"${range}` : 'type="text"'}` +
    `${o.kind === 'real' ? ' step="any"' : ''} placeholder="${hint}"></label>`;
}

// Every training option the fieldsets above do not show, in the table's groups; the advanced ones
// folded in a <details> per group. Each joins TRAIN_FIELDS, so it travels in requests and the URL.
function buildOptionFields(table) {
  const shown = new Set(formFields().map(el => el.name));
  const groups = new Map();
  for (const o of table) {
    if (!(o.name in TRAIN_FIELDS)) TRAIN_FIELDS[o.name] = shown.has(o.name) ? 'text' : FIELD_KINDS[o.kind];
    if (shown.has(o.name)) continue;
    if (!groups.has(o.group)) groups.set(o.group, { basic: [], advanced: [] });
    groups.get(o.group)[o.advanced ? 'advanced' : 'basic'].push(o);
  }
  // The fieldsets' own selects offer every name the table knows (e.g. every optimizer).
  for (const o of table) {
    const el = $(`select[name="${o.name}"]`, form);
    if (!el || !o.choices) continue;
    const have = new Set(Array.from(el.options, x => x.value));
    for (const n of o.choices.split(', ')) if (!have.has(n)) el.insertAdjacentHTML('beforeend', `<option>${esc(n)}</option>`);
  }
  const box = $('#more-options');
  const err = $('#more-options-err');
  let html = '';
  for (const [group, { basic, advanced }] of groups) {
    const fields = list => `<div class="fields">${list.map(optionField).join('')}</div>`;
    const inner = basic.length && advanced.length
      ? `${fields(basic)}<details class="option-group"><summary>advanced</summary>${fields(advanced)}</details>`
      : fields(basic.length ? basic : advanced);
    html += `<details class="option-group"${basic.length ? ' open' : ''}><summary>${esc(group)}</summary>${inner}</details>`;
  }
  err.insertAdjacentHTML('beforebegin', html);
  err.dataset.for = [...groups.values()].flatMap(g => [...g.basic, ...g.advanced]).map(o => o.name).join(' ');
  box.dataset.options = String(table.length);
}

// Every serve option the Serving fieldset does not show (serve_options(): name, kind, help), as
// serve_<name> fields; each joins SERVE_FIELDS, so it travels in requests, the URL and the CLI line.
const SERVE_KINDS = { count: 'int', real: 'real', flag: 'switch', text: 'text', size: 'text' };
function buildServeFields(list) {
  const shown = new Set(Object.values(SERVE_FIELDS).map(([name]) => name));
  const extra = list.filter(o => !shown.has(o.name));
  $('#more-serve-fields').innerHTML = extra.map(o => {
    const field = `serve_${o.name}`;
    SERVE_FIELDS[field] = [o.name, SERVE_KINDS[o.kind]];
    const label = esc(o.name.replace(/_/g, ' '));
    if (o.kind === 'flag') return `<label class="check" title="${esc(o.help)}"><input name="${field}" type="checkbox"> ${label}</label>`;
    const number = o.kind === 'count' || o.kind === 'real';
    return `<label title="${esc(o.help)}">${label} <input name="${field}" ${number ? 'type="number"' : 'type="text"'}` +
      `${o.kind === 'real' ? ' step="any"' : ''} placeholder="default"></label>`;
  }).join('');
  $('#more-serve-options-err').dataset.for = extra.map(o => `serve_${o.name}`).join(' ');
  for (const o of extra) SERVE_ERROR_FIELDS[o.name] = `serve_${o.name}`;  // the engine names the option
  $('#more-serve-options').dataset.options = String(list.length);
}

async function main() {
  const presets = JSON.parse((engine = await createActmem()).presets());
  const gpus = JSON.parse(engine.gpus());
  const options = JSON.parse(engine.options());
  buildOptionFields(options.table);
  buildServeFields(options.serve);
  $('#f-model').innerHTML = presets.map(p => `<option value="${esc(p.name)}" title="${esc(p.description)}">${esc(p.name)}</option>`).join('') +
    `<option value="${CONFIG}">config.json (paste or upload)…</option>`;
  $('#f-model').value = DEFAULT_MODEL;
  for (const sel of $$('.gpu-select'))
    sel.innerHTML = '<option value="">none (no fit verdict)</option>' +
      gpus.map(g => `<option value="${esc(g.name)}">${esc(g.name)} · ${gib(g.total_bytes)} GiB</option>`).join('');
  $('[name="gpu"]').value = 'h100-80gb';
  $('[name="serve_gpu"]').value = 'h100-80gb';
  state.defaults = readState();
  applyQuery(location.search);
  $('#loading').hidden = true;

  // Typing recomputes on every keystroke ('input'); a choice or a tick on 'change' (fired once per choice).
  const typed = el => el.tagName === 'TEXTAREA' || (el.tagName === 'INPUT' && !['checkbox', 'file'].includes(el.type));
  // The planner searches thousands of layouts (~0.1 s): it waits for a pause in the typing.
  let pending = null;
  const changed = () => {
    clearTimeout(pending);
    if (tab === 'plan') pending = setTimeout(update, 300); else update();
  };
  form.addEventListener('input', e => { if (typed(e.target)) changed(); });
  form.addEventListener('change', e => { if (!typed(e.target) && e.target.type !== 'file') { syncModel(); changed(); } });
  $('#f-upload').addEventListener('change', async e => {
    const file = e.target.files[0];
    if (!file) return;
    $('#f-config').value = await file.text();
    state.configName = file.name;
    $('#f-model').value = CONFIG;
    syncModel();
    update();
  });
  $('#f-config').addEventListener('input', () => { state.configName = state.configName || 'config.json'; });
  for (const b of $$('.tabs button')) b.addEventListener('click', () => setTab(b.dataset.tab));
  document.addEventListener('click', e => {
    const a = e.target.closest('a.layout');
    if (!a) return;
    e.preventDefault();
    applyQuery(a.getAttribute('href') + '&tab=train');
    update();
    window.scrollTo(0, 0);
  });
  window.addEventListener('popstate', () => { applyQuery(location.search); update(); });
  update();
  document.body.dataset.ready = '1';
}

// For the browser test: recompute the current state n times; the fastest is the cost without the
// machine's other load (a shared CI runner's scheduling noise only ever adds).
window.actmemRecompute = n => {
  const before = window.actmemTimings.length;
  for (let i = 0; i < n; i++) update();
  const runs = window.actmemTimings.splice(before);
  return { engine_ms: Math.min(...runs.map(t => t.engine_ms)), total_ms: Math.min(...runs.map(t => t.total_ms)), ok: runs[0].ok };
};

main().catch(e => {
  $('#loading').hidden = true;
  $('#fatal').hidden = false;
  $('#fatal').textContent = `The engine did not load: ${e && e.message ? e.message : e}`;
});
