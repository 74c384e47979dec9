// drover dashboard: plain JavaScript, no libraries. Polls the scheduler's JSON API
// (scheduler/dashboard.h) once a second and redraws the current page.
'use strict';

const main = document.getElementById('main');
const statusEl = document.getElementById('status');
let timer = null;
let page = null;  // {name, arg, state}

function esc(s) {
  return String(s == null ? '' : s).replace(/[&<>"']/g,
      c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
}
function num(x) { return x == null || x === '' ? 0 : Number(x); }
function bytes(n) {
  n = num(n);
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}
function dur(ms) {
  ms = Math.max(0, num(ms));
  if (ms < 1000) return ms + ' ms';
  const s = Math.round(ms / 1000);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + 'm' + (s % 60) + 's';
  return Math.floor(s / 3600) + 'h' + Math.floor((s % 3600) / 60) + 'm';
}
function when(ms) { return num(ms) ? new Date(num(ms)).toLocaleTimeString() : '-'; }
function state(s) { return '<span class="state ' + esc(s) + '">' + esc(s) + '</span>'; }
function bar(used, total) {
  const pct = total > 0 ? Math.min(100, Math.round(100 * used / total)) : 0;
  return '<span class="bar"><span style="width:' + pct + '%"></span></span>';
}
function card(label, value, sub) {
  return '<div class="card"><div class="muted">' + esc(label) + '</div><div class="n">' +
      esc(value) + '</div>' + (sub ? '<div class="muted">' + esc(sub) + '</div>' : '') + '</div>';
}

async function api(path) {
  const res = await fetch(path, {credentials: 'same-origin', cache: 'no-store'});
  if (res.status === 401) throw new Error('unauthorized');
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || ('HTTP ' + res.status));
  return body;
}

// ---------------------------------------------------------------- cluster
function clusterWarnings(c) {
  const w = [];
  for (const n of c.nodes) {
    if (n.state !== 'ALIVE') w.push(n.id + ' is ' + n.state + (n.reason ? ': ' + n.reason : ''));
    else if (n.heartbeatAgoMs > 3000) w.push(n.id + ': last heartbeat ' + dur(n.heartbeatAgoMs) + ' ago');
    for (const x of n.warnings) w.push(n.id + ': ' + x);
    if (n.store && n.store.capacity > 0 && n.store.used / n.store.capacity > 0.9) {
      w.push(n.id + ': object store ' + Math.round(100 * n.store.used / n.store.capacity) + '% full');
    }
  }
  if (c.pending && c.pending.no_nodes) w.push(c.pending.no_nodes + ' job(s) wait: no node is alive');
  return w;
}

function renderCluster(c) {
  let cpuT = 0, cpuF = 0, gpuT = 0, gpuF = 0, memT = 0, memF = 0, alive = 0;
  for (const n of c.nodes) {
    if (n.state !== 'ALIVE') continue;
    alive++;
    cpuT += n.cpus.total; cpuF += n.cpus.free; gpuT += n.gpus.total; gpuF += n.gpus.free;
    memT += num(n.memory.total); memF += num(n.memory.free);
  }
  const jobs = c.jobs || {};
  let h = '<h2>Cluster</h2><div class="cards">' +
      card('Nodes alive', alive + ' / ' + c.nodes.length) +
      card('CPUs used', (cpuT - cpuF) + ' / ' + cpuT) +
      card('GPUs used', (gpuT - gpuF) + ' / ' + gpuT) +
      card('Memory used', bytes(memT - memF), 'of ' + bytes(memT)) +
      card('Jobs running', jobs.RUNNING || 0, (jobs.PENDING || 0) + ' pending') +
      card('Jobs failed', jobs.FAILED || 0, (jobs.SUCCEEDED || 0) + ' succeeded') +
      (c.leases ? card('Leases held', c.leases.held, c.leases.pendingRequests + ' requests waiting') : '') +
      '</div>';
  const w = clusterWarnings(c);
  h += '<h3>Warnings</h3>' + (w.length ? '<ul class="warnings">' + w.map(x => '<li>' + esc(x) + '</li>').join('') + '</ul>'
                                        : '<p class="muted">none</p>');
  h += '<h3>Nodes</h3><table id="nodes"><tr><th>Node</th><th>State</th><th>Host / IP</th>' +
      '<th>CPUs used / total</th><th>GPUs used / total</th><th>Memory used / total</th>' +
      '<th>Object store</th><th>Metrics</th></tr>';
  for (const n of c.nodes) {
    const st = n.store;
    h += '<tr data-node="' + esc(n.id) + '"><td>' + esc(n.id) + '</td><td>' + state(n.state) + '</td><td>' +
        esc(n.hostname) + '<br><span class="muted">' + esc(n.ip) + '</span></td><td>' +
        bar(n.cpus.total - n.cpus.free, n.cpus.total) + (n.cpus.total - n.cpus.free) + ' / ' + n.cpus.total +
        '</td><td>' + bar(n.gpus.total - n.gpus.free, n.gpus.total) + (n.gpus.total - n.gpus.free) + ' / ' +
        n.gpus.total + (n.gpus.names.length ? '<br><span class="muted">' + esc(n.gpus.names.join(', ')) + '</span>' : '') +
        '</td><td>' + bar(num(n.memory.total) - num(n.memory.free), num(n.memory.total)) +
        bytes(num(n.memory.total) - num(n.memory.free)) + ' / ' + bytes(n.memory.total) + '</td><td>' +
        (st ? bar(num(st.used), num(st.capacity)) + bytes(st.used) + ' / ' + bytes(st.capacity) +
              '<br><span class="muted">' + st.objects + ' objects, ' + bytes(st.spilledBytes) + ' spilled, ' +
              st.evictions + ' evictions</span>' : '<span class="muted">none</span>') +
        '</td><td class="muted">' + esc(n.metricsAddress || '-') + '</td></tr>';
  }
  h += '</table><p class="muted">Scheduler ' + esc(c.scheduler.address) + ' (state: ' +
      esc(c.scheduler.stateBackend) + '); Prometheus scrapes http://' + esc(location.host) + '/metrics</p>';
  main.innerHTML = h;
}

// ---------------------------------------------------------------- jobs
function renderJobs(data, st) {
  let h = '<h2>Jobs</h2><div class="filters"><select id="f-state"><option value="">all states</option>' +
      ['PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'].map(s =>
          '<option' + (st.state === s ? ' selected' : '') + '>' + s + '</option>').join('') +
      '</select><input id="f-q" placeholder="id or name" value="' + esc(st.q) + '">' +
      '<span class="muted">' + data.matched + ' matching</span></div>';
  h += '<table id="jobs"><tr><th>Job</th><th>Name</th><th>State</th><th>Procs</th><th>Nodes</th>' +
      '<th>Restarts</th><th>Submitted</th><th>Ran for</th><th>Reason</th></tr>';
  for (const j of data.jobs) {
    const start = num(j.startMs), end = num(j.endMs) || data.nowMs;
    h += '<tr data-job="' + esc(j.id) + '"><td><a href="#/job/' + esc(j.id) + '">' + esc(j.id) + '</a></td><td>' +
        esc(j.name) + (j.driver ? ' <span class="muted">(driver)</span>' : '') + '</td><td>' + state(j.state) +
        '</td><td class="num">' + j.nproc + '</td><td>' + esc(j.nodes.join(', ')) + '</td><td class="num">' +
        j.restarts + ' / ' + j.maxRestarts + '</td><td>' + when(j.submitMs) + '</td><td>' +
        (start ? dur(end - start) : '-') + '</td><td class="muted">' + esc(j.reason) + '</td></tr>';
  }
  main.innerHTML = h + '</table>';
  const fs = document.getElementById('f-state'), fq = document.getElementById('f-q');
  fs.onchange = () => { st.state = fs.value; refresh(); };
  fq.oninput = () => { st.q = fq.value; };
  fq.onchange = () => refresh();
  if (st.focus) { fq.focus(); fq.setSelectionRange(fq.value.length, fq.value.length); }
  fq.onfocus = () => { st.focus = true; };
  fq.onblur = () => { st.focus = false; };
}

function rankRows(job) {
  const exited = new Set((job.exitedRanks || []).map(Number));
  const ok = new Set((job.succeededRanks || []).map(Number));
  const cause = job.rootCause && (job.rootCause.nodeId || job.rootCause.error) ? job.rootCause : null;
  return (job.placement || []).map(p => {
    let s = job.state === 'PENDING' ? 'pending' : 'running';
    if (ok.has(p.rank)) s = 'succeeded';
    else if (exited.has(p.rank)) s = cause && cause.rank === p.rank ? 'failed' : 'stopped';
    else if (job.restarting) s = 'restarting';
    return {rank: p.rank, node: p.nodeId, ip: p.nodeIp, local: p.localRank, gpus: p.gpuIds || [], state: s};
  });
}

function exitText(e) {
  if (!e) return '';
  if (e.error) return e.error;
  if (e.signal) return 'killed by signal ' + e.signal;
  return 'exited with code ' + e.exitCode;
}

// ---------------------------------------------------------------- timeline
function renderTimeline(events, endUs) {
  if (!events.length) return '<p class="muted">no events kept for this job</p>';
  const t0 = num(events[0].timeUs);
  const t1 = Math.max(endUs, num(events[events.length - 1].timeUs)) || t0 + 1;
  const span = Math.max(1, t1 - t0);
  const rows = new Map();  // label -> {spans: [], marks: []}
  const row = label => { if (!rows.has(label)) rows.set(label, {spans: [], marks: []}); return rows.get(label); };
  const open = new Map();  // key -> {start, row, cls, title}
  // A rank that exits at once may be reported before its start: its bar then runs from
  // its placement, and the late start is ignored.
  const placedAt = new Map(), exited = new Set();
  row('job');
  for (const e of events) {
    const t = num(e.timeUs), kind = e.kind.replace('TIMELINE_', '');
    const ranks = e.ranks || [];
    if (kind === 'SUBMITTED' || kind === 'RESTARTING' || kind === 'REQUEUED' || kind === 'ENDED' || kind === 'PLACED') {
      if (kind !== 'PLACED' || !row('job').marks.some(m => m.t === t)) {
        row('job').marks.push({t, bad: kind === 'RESTARTING' || e.state === 'FAILED',
                               title: kind.toLowerCase() + (e.detail ? ': ' + e.detail : '') + (e.state ? ' (' + e.state + ')' : '')});
      }
    }
    if (kind === 'PLACED') for (const r of ranks) placedAt.set(r, t);
    if (kind === 'RANKS_STARTED') {
      for (const r of ranks) {
        if (exited.has(r + '/' + e.generation)) continue;
        const label = e.nodeId + ' rank ' + r;
        row(label);
        open.set('rank' + r, {start: t, label, title: 'rank ' + r + ' generation ' + e.generation + ' on ' + e.nodeId});
      }
    } else if (kind === 'RANK_EXITED') {
      const r = ranks[0], o = open.get('rank' + r);
      exited.add(r + '/' + e.generation);
      const failed = e.exit && (e.exit.error || num(e.exit.signal) || num(e.exit.exitCode));
      const label = o ? o.label : e.nodeId + ' rank ' + r;
      row(label).spans.push({a: o ? o.start : (placedAt.has(r) ? placedAt.get(r) : t), b: t, cls: failed ? 'failed' : 'succeeded',
                             title: (o ? o.title : 'rank ' + r) + ': ' + e.detail});
      open.delete('rank' + r);
    } else if (kind === 'LEASE_GRANTED') {
      const label = e.nodeId + ' ' + e.workerId;
      row(label);
      open.set('lease' + e.leaseId, {start: t, label, cls: 'lease', title: e.leaseId + ' on ' + e.workerId + (e.actorId ? ' for ' + e.actorId : '')});
    } else if (kind === 'LEASE_RETURNED') {
      const o = open.get('lease' + e.leaseId);
      if (o) { row(o.label).spans.push({a: o.start, b: t, cls: 'lease', title: o.title + ': ' + e.detail}); open.delete('lease' + e.leaseId); }
    } else if (kind === 'ACTOR') {
      const key = 'actor' + e.actorId, label = 'actor ' + e.actorId, o = open.get(key);
      row(label);
      if (o) { row(label).spans.push({a: o.start, b: t, cls: 'actor', title: o.title + ' until ' + e.state}); open.delete(key); }
      if (e.state === 'ACTOR_ALIVE') open.set(key, {start: t, label, cls: 'actor', title: e.actorId + ' on ' + e.nodeId});
      else row(label).marks.push({t, bad: e.state !== 'ACTOR_PENDING', title: e.state + ': ' + e.detail});
    } else if (kind === 'WORKER_EXITED') {
      row(e.nodeId + ' ' + e.workerId).marks.push({t, bad: true, title: 'worker exited: ' + e.detail});
    }
  }
  for (const o of open.values()) row(o.label).spans.push({a: o.start, b: t1, cls: o.cls || '', title: o.title + ' (running)'});
  const x = t => (100 * (t - t0) / span).toFixed(3) + '%';
  let h = '<div class="tl" id="timeline">';
  for (const [label, r] of rows) {
    h += '<div class="row"><div class="label" title="' + esc(label) + '">' + esc(label) + '</div><div class="lane">';
    for (const s of r.spans) {
      h += '<div class="span ' + s.cls + '" style="left:' + x(s.a) + ';width:calc(' +
          (100 * (s.b - s.a) / span).toFixed(3) + '% + 2px)" title="' + esc(s.title) + '"></div>';
    }
    for (const m of r.marks) h += '<div class="mark' + (m.bad ? ' bad' : '') + '" style="left:' + x(m.t) + '" title="' + esc(m.title) + '"></div>';
    h += '</div></div>';
  }
  return h + '</div><p class="muted">' + dur(Math.round(span / 1000)) + ' from submission; hover for details. ' +
      '<code>drover timeline JOB -o trace.json</code> writes the same for Perfetto.</p>';
}

// ---------------------------------------------------------------- one job
function renderJob(data, st) {
  const j = data.job, rows = rankRows(j);
  const done = ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(j.state);
  const endUs = done ? num(j.endTimeMs) * 1000 : data.nowMs * 1000;
  const cause = j.rootCause && (j.rootCause.nodeId || j.rootCause.error) ? j.rootCause : null;
  let h = '<h2>' + esc(j.jobId) + ' ' + state(j.state) + ' <span class="muted">' + esc(j.spec.name) + '</span></h2>' +
      '<p>' + esc(j.reason) + '</p><div class="cards">' +
      card('Processes', j.spec.nproc, j.liveProcesses + ' alive') +
      card('Restarts', j.restartCount + ' / ' + j.spec.maxRestarts) +
      card('Submitted', when(j.submitTimeMs)) +
      card('Exit code', done ? j.exitCode : '-') + '</div>';
  if (cause) {
    h += '<h3>Root cause</h3><pre class="cause" id="root-cause">rank ' + esc(cause.rank) + ' on ' +
        esc(cause.nodeId) + ' ' + esc(exitText(cause)) + (cause.stderrTail ? '\n' + esc(cause.stderrTail) : '') + '</pre>';
  }
  h += '<h3>Ranks (generation ' + j.restartCount + ')</h3><table id="ranks"><tr><th>Rank</th><th>Node</th>' +
      '<th>Local rank</th><th>GPUs</th><th>State</th></tr>' +
      rows.map(r => '<tr><td class="num">' + r.rank + '</td><td>' + esc(r.node) + ' <span class="muted">' + esc(r.ip) +
          '</span></td><td class="num">' + r.local + '</td><td>' + esc(r.gpus.join(',') || '-') + '</td><td>' +
          state(r.state) + '</td></tr>').join('') + '</table>';
  h += '<h3>Timeline</h3>' + renderTimeline(data.timeline.events, endUs);
  h += '<h3>Output <span class="muted">(live tail)</span></h3>';
  for (const node of j.nodesUsed || []) {
    h += '<div class="muted">' + esc(node) + '</div><pre class="log" data-node="' + esc(node) + '">' +
        esc(st.logs[node] ? st.logs[node].text : '') + '</pre>';
  }
  main.innerHTML = h;
  for (const pre of main.querySelectorAll('pre.log')) pre.scrollTop = pre.scrollHeight;
}

async function pollLogs(job, st) {
  for (const node of job.nodesUsed || []) {
    const l = st.logs[node] || (st.logs[node] = {offsets: {}, text: '', partial: {}});
    const o = Object.entries(l.offsets).map(([k, v]) => k + '.' + v).join(',');
    let data;
    try { data = await api('/api/logs?id=' + encodeURIComponent(job.jobId) + '&node=' + encodeURIComponent(node) + '&o=' + o); }
    catch (e) { continue; }
    for (const c of data.chunks) {
      const key = c.rank + '.' + c.stream;
      l.offsets[key] = c.end;
      const text = (l.partial[key] || '') + c.data;
      const lines = text.split('\n');
      l.partial[key] = lines.pop();
      for (const line of lines) l.text += '[rank' + c.rank + ']: ' + line + '\n';
    }
    if (l.text.length > 65536) l.text = l.text.slice(l.text.length - 65536);
  }
}

// ---------------------------------------------------------------- tasks
function renderTasks(t) {
  const c = t.counts || {};
  let h = '<h2>Tasks &amp; actors</h2><div class="cards">' +
      card('Leases held', c.leases || 0, (c.pendingRequests || 0) + ' requests waiting') +
      card('Leases granted', c.granted || 0, (c.ended || 0) + ' ended') +
      card('Actors alive', c.actorsAlive || 0) + card('Actors pending', c.actorsPending || 0) +
      card('Actors restarting', c.actorsRestarting || 0) + card('Actors dead', c.actorsDead || 0) + '</div>' +
      '<p class="muted">Tasks go from their owner straight to leased workers; the scheduler sees leases, ' +
      'actors and worker exits, not single tasks.</p>';
  h += '<h3>Failures</h3><table id="failures"><tr><th>When</th><th>Job</th><th>What</th><th>Node</th><th>Cause</th></tr>' +
      t.failures.map(f => '<tr><td>' + when(num(f.timeUs) / 1000) + '</td><td><a href="#/job/' + esc(f.job) + '">' +
          esc(f.job) + '</a></td><td>' + esc(f.kind.replace('TIMELINE_', '').toLowerCase()) +
          (f.actorId ? ' ' + esc(f.actorId) : '') + (f.ranks && f.ranks.length ? ' rank ' + f.ranks.join(',') : '') +
          '</td><td>' + esc(f.nodeId) + '</td><td>' + esc(f.detail) +
          (f.exit && f.exit.stderrTail ? '<pre class="cause">' + esc(f.exit.stderrTail) + '</pre>' : '') + '</td></tr>').join('') +
      '</table>';
  h += '<h3>Actors</h3><table id="actors"><tr><th>Actor</th><th>Class</th><th>Job</th><th>State</th><th>Node</th>' +
      '<th>Restarts</th><th>Reason</th></tr>' +
      t.actors.map(a => '<tr><td>' + esc(a.name || a.actorId) + '</td><td>' + esc(a.className) + '</td><td>' +
          esc(a.jobId) + '</td><td>' + state(a.state) + '</td><td>' + esc(a.nodeId || '-') + '</td><td class="num">' +
          a.restarts + ' / ' + a.maxRestarts + '</td><td class="muted">' + esc(a.reason || a.pendingReason) + '</td></tr>').join('') +
      '</table>';
  h += '<h3>Leases</h3><table id="leases"><tr><th>Lease</th><th>Job</th><th>Node</th><th>Worker</th><th>Owner</th></tr>' +
      t.leases.map(l => '<tr><td>' + esc(l.id) + '</td><td>' + esc(l.job) + '</td><td>' + esc(l.node) + '</td><td>' +
          esc(l.worker) + (l.actor ? ' (' + esc(l.actor) + ')' : '') + '</td><td class="muted">' + esc(l.owner) + '</td></tr>').join('') +
      '</table>';
  main.innerHTML = h;
}

// ---------------------------------------------------------------- routing
async function refresh() {
  const p = page;
  try {
    if (p.name === 'cluster') renderCluster(await api('/api/cluster'));
    else if (p.name === 'jobs') {
      const q = '/api/jobs?limit=500&state=' + encodeURIComponent(p.state.state || '') + '&q=' + encodeURIComponent(p.state.q || '');
      const data = await api(q);
      if (p === page) renderJobs(data, p.state);
    } else if (p.name === 'job') {
      const data = await api('/api/job?id=' + encodeURIComponent(p.arg));
      if (!p.state.final) await pollLogs(data.job, p.state);
      if (['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(data.job.state) && data.job.liveProcesses === 0) {
        p.state.final = (p.state.final || 0) + 1;  // one more read after the end, then stop
        if (p.state.final > 2) p.state.final = 2;
      }
      if (p === page) renderJob(data, p.state);
    } else if (p.name === 'tasks') renderTasks(await api('/api/tasks'));
    statusEl.textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.message === 'unauthorized') {
      main.innerHTML = '<h2>Not logged in</h2><p>Run <code>drover dashboard</code> and open the link it prints.</p>';
      clearInterval(timer);
    }
    statusEl.textContent = 'error: ' + e.message;
  }
}

function route() {
  const parts = (location.hash || '#/cluster').slice(2).split('/');
  const name = ['cluster', 'jobs', 'job', 'tasks'].includes(parts[0]) ? parts[0] : 'cluster';
  page = {name, arg: decodeURIComponent(parts.slice(1).join('/')), state: {logs: {}, state: '', q: ''}};
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('active', a.dataset.page === name || (name === 'job' && a.dataset.page === 'jobs'));
  }
  clearInterval(timer);
  refresh();
  timer = setInterval(refresh, 1000);
}

window.addEventListener('hashchange', route);
route();
