// The console: sign-in, the queue, the clocks, the jobs, one job, the audit chain,
// the webhook deliveries; with the operator's token, the operator's part instead
// (operator.js).
// Every value shown comes from the daemon's public API and is set as text.

import * as api from './api.js';
import * as charts from './charts.js';
import * as hooks from './deliveries.js';
import * as operator from './operator.js';
import { age, byId, bytes, el, ms, replace, time } from './dom.js';

const REFRESH_MS = 5000;
const view = {
  filters: {},
  cursor: null, // the page shown: null for the newest
  newer: [], // the cursors of the pages before it
  next: null,
  job: null, // the job id shown
  timer: null,
  operator: false, // signed in with the operator's token
};

function show(signedIn) {
  byId('signin').hidden = signedIn;
  byId('console').hidden = !signedIn || view.operator;
  byId('operator').hidden = !signedIn || !view.operator;
  byId('session').hidden = !signedIn;
}

function failure(e) {
  if (e instanceof api.ApiError) {
    if (e.status === 401) {
      signOut('The token is no longer accepted: sign in again.');
      return '';
    }
    const cid = e.correlationId ? ` (correlation id ${e.correlationId})` : '';
    return `${e.code}: ${e.message}${cid}`;
  }
  return `The daemon cannot be reached: ${e.message}`;
}

// Refreshes redraw parts of the page every few seconds. A part is redrawn only when
// what it shows changed (a live region would otherwise read it out again each time),
// and the control that had the keyboard's focus gets it back (a redraw replaces it).
const shown = new Map();

function redraw(node, key, draw) {
  if (shown.get(node.id) === key) return;
  shown.set(node.id, key);
  const active = document.activeElement;
  const focusKey = active && node.contains(active) ? active.dataset.key : undefined;
  draw();
  if (focusKey !== undefined) {
    const again = [...node.querySelectorAll('[data-key]')].find((e) => e.dataset.key === focusKey);
    if (again) again.focus();
  }
}

// --- the queue, the clocks and the chain ------------------------------------------

function tile(label, value, note, noteId) {
  return el('div', { class: 'tile' },
            el('dt', {}, label), el('dd', {}, el('span', { class: 'n' }, value),
                                      note ? el('span', { class: 'note', id: noteId }, note)
                                        : null));
}

function renderStats(stats) {
  const now = stats.now;
  const { at, ...seen } = stats;
  byId('updated').textContent = `Updated ${time(at)}.`;
  redraw(byId('queue-body'), JSON.stringify([seen.now, seen.ended]), () => {
    drawStats(stats, now);
    byId('queue-news').textContent = `${now.queued} queued, ${now.processing} processing, `
      + `${now.failed} failed.`;
  });
  byId('oldest').textContent = `oldest waits ${age(stats.oldest_queued_age_s)}`;
  redraw(byId('phases-chart'), JSON.stringify(seen), () => drawCharts(stats));
}

function drawStats(stats, now) {
  replace(byId('queue-body'), el('dl', { class: 'tiles' },
    tile('Queued', now.queued, `oldest waits ${age(stats.oldest_queued_age_s)}`, 'oldest'),
    tile('Processing', now.processing),
    tile('Failed', now.failed, 'kept until retried'),
    tile('Ready in the hour', stats.ended.ready),
    tile('Canceled in the hour', stats.ended.canceled)));
}

function drawCharts(stats) {
  replace(byId('phases-chart'), charts.phases(stats, 'phases-cap'));
  replace(byId('ended-chart'), charts.ended(stats, 'ended-cap'));
  replace(byId('clock-table').tBodies[0], charts.clockRows(stats).map(
    ([label, mean, max]) => el('tr', {}, el('th', { scope: 'row' }, label),
                               el('td', {}, mean), el('td', {}, max))));
}

function renderAudit(head) {
  const verdict = head.ok ? 'The samples verify.' : 'A sample does not verify.';
  const rows = [
    ['Head', head.head ? `event ${head.head.seq}, ${head.head.hash.slice(0, 16)}…` : 'no events yet'],
    ['Last events of the chain', sample(head.tail)],
    [`Events of your ${head.tenant.jobs} newest jobs`, sample(head.tenant)],
  ];
  redraw(byId('audit-body'), JSON.stringify(head), () => replace(byId('audit-body'),
    el('p', { class: head.ok ? 'ok' : 'bad' }, verdict),
    el('dl', { class: 'facts' }, rows.map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])),
    el('p', { class: 'hint' }, 'Each sampled event\u2019s hash is recomputed and linked to the '
       + 'event before it. The whole chain is checked by \u201ccasesignd audit verify\u201d.')));
}

function sample(s) {
  if (!s.events) return 'none';
  const range = `${s.events} events (${s.from_seq}–${s.to_seq})`;
  if (s.ok) return `${range}: intact`;
  return `${range}: broken at event ${s.first_bad.seq} (${s.first_bad.reason})`;
}

async function refreshSummary() {
  try {
    const [stats, head] = await Promise.all([api.getStats(), api.getAudit()]);
    renderStats(stats);
    renderAudit(head);
  } catch (e) {
    byId('updated').textContent = failure(e);
  }
}

// --- the jobs -----------------------------------------------------------------------

function jobRow(job) {
  const open = el('button', { type: 'button', class: 'link', 'data-job': job.job_id,
                              'data-key': job.job_id,
                              'aria-label': `Open job ${job.job_id}` }, job.job_id);
  open.addEventListener('click', () => openJob(job.job_id, true));
  return el('tr', { 'data-state': job.state },
    el('td', { class: 'mono' }, open), el('td', {}, job.kind), el('td', {}, job.case_id || '–'),
    el('td', {}, el('span', { class: `state st-${job.state}` }, job.state)),
    el('td', { class: 'num' }, job.attempts), el('td', {}, time(job.created_at)),
    el('td', { class: 'num' }, ms(job.timings ? job.timings.total_ms : null)));
}

async function refreshJobs(announce) {
  const status = byId('jobs-status');
  try {
    const page = await api.listJobs(view.filters, view.cursor);
    view.next = page.next_cursor;
    const body = byId('jobs-body');
    // The key holds what a row shows, so a changed row is always redrawn.
    redraw(body, JSON.stringify(page.jobs.map((j) => [j.job_id, j.kind, j.case_id, j.state,
                                                      j.attempts, j.created_at, j.timings])),
           () => replace(body, page.jobs.length ? page.jobs.map(jobRow)
             : el('tr', {}, el('td', { colspan: 7 }, 'No jobs match.'))));
    byId('newer').disabled = view.newer.length === 0;
    byId('older').disabled = !view.next;
    if (announce) status.textContent = `${page.jobs.length} jobs shown.`;
  } catch (e) {
    status.textContent = failure(e);
  }
}

function applyFilters(event) {
  event.preventDefault();
  const form = byId('filters');
  if (!form.reportValidity()) return;
  view.filters = { state: byId('f-state').value, kind: byId('f-kind').value.trim(),
                   case_id: byId('f-case').value.trim() };
  view.cursor = null;
  view.newer = [];
  refreshJobs(true);
}

// --- one job ------------------------------------------------------------------------

function fact(label, value) {
  return [el('dt', {}, label), el('dd', {}, value)];
}

function whereText(where) {
  if (!where || typeof where !== 'object') return '–';
  const parts = ['page', 'object', 'attachment', 'field']
    .filter((k) => where[k] !== undefined && where[k] !== null)
    .map((k) => `${k} ${where[k]}`);
  return parts.length ? parts.join(', ') : '–';
}

// Where the signature went, from the job's signed event (its detail's placement): the
// document's own field, or a page and box in points; and whether it is seen.
function placementText(events) {
  const signed = events.find((ev) => ev.type === 'signed');
  const p = signed && signed.detail && signed.detail.placement;
  if (!p || typeof p !== 'object') return null;
  let where;
  if (typeof p.field === 'string') where = `field “${p.field}”`;
  else if (Array.isArray(p.box)) where = `page ${p.page}, box ${p.box.join(', ')} pt`;
  else where = `page ${p.page}`;
  return `${where}, ${p.visible ? 'visible' : 'invisible'}`;
}

function download(result) {
  // Only a link into this daemon's artifacts: anything else the answer held is shown
  // as text, never followed.
  const url = result.download_url;
  if (typeof url !== 'string' || !url.startsWith('/v1/artifacts/')) return 'none';
  return el('a', { href: url, download: '' },
            `Download (${result.media_type || 'file'}, ${bytes(result.size)})`);
}

function renderJob(job, events, deliveries) {
  const { result, ...rest } = job; // a fresh download link each read: not a change
  const key = JSON.stringify([rest, result && result.sha256, events.length, deliveries]);
  redraw(byId('job'), key, () => drawJob(job, events, deliveries));
}

function drawJob(job, events, deliveries) {
  byId('job-h').textContent = `Job ${job.job_id}`;
  const t = job.timings || {};
  const facts = [
    fact('State', el('span', { class: `state st-${job.state}` }, job.state)),
    fact('Kind', job.kind), fact('Case', job.case_id || '–'), fact('Attempts', job.attempts),
    fact('Version', job.version || '–'),
    fact('Created', time(job.created_at)), fact('Updated', time(job.updated_at)),
    fact('Admission', ms(t.admission_ms)), fact('Queue wait', ms(t.queue_wait_ms)),
    fact('Processing', ms(t.processing_ms)), fact('Total', ms(t.total_ms)),
  ];
  if (job.error) {
    facts.push(fact('Error', `${job.error.code} (${job.error.category})`));
    if (job.error.reason) {
      // A refused document: why, in a word and in words, and where in it.
      facts.push(fact('Reason', el('span', { class: 'mono' }, job.error.reason)),
                 fact('Said', job.error.message || '–'),
                 fact('Where', whereText(job.error.where)));
    }
    facts.push(fact('Correlation id', job.error.correlation_id));
  }
  const placement = placementText(events);
  if (placement) facts.push(fact('Signature', placement));
  if (job.result && job.result.sha256) {
    facts.push(fact('SHA-256', el('span', { class: 'mono wrap' }, job.result.sha256)));
    if (job.result.removed_at) {
      // Retention or an erasure removed the artifact: what it was, and when it went.
      facts.push(fact('Result', `removed (${bytes(job.result.size)})`),
                 fact('Removed', time(job.result.removed_at)));
    } else {
      facts.push(fact('Result', download(job.result)),
                 fact('Link expires', time(job.result.expires_at)));
    }
  }
  for (const d of deliveries) facts.push(fact('Webhook', hooks.summary(d)));
  replace(byId('job-facts'), facts);
  const actions = [];
  if (job.state === 'failed') actions.push(action('Retry', api.retryJob, job));
  if (job.state === 'queued') actions.push(action('Cancel', api.cancelJob, job));
  replace(byId('job-actions'), actions);
  replace(byId('events-table').tBodies[0], events.map((ev) => el('tr', {},
    el('td', { class: 'num' }, ev.seq), el('td', {}, time(ev.at)), el('td', {}, ev.type),
    el('td', { class: 'num' }, ev.attempt), el('td', { class: 'mono' }, ev.actor))));
}

function action(label, verb, job) {
  const button = el('button', { type: 'button', class: 'act', 'data-key': label },
                    `${label} the job`);
  button.addEventListener('click', async () => {
    button.disabled = true;
    const status = byId('job-status');
    try {
      await verb(job.job_id);
      status.textContent = `${label}: done.`;
      await openJob(job.job_id, false);
      refreshJobs(false);
      refreshSummary();
    } catch (e) {
      status.textContent = failure(e);
      button.disabled = false;
    }
  });
  return button;
}

async function openJob(id, focus) {
  view.job = id;
  const section = byId('job');
  try {
    const [job, events, sent] = await Promise.all([api.getJob(id), api.getEvents(id),
                                                   api.listDeliveries(id)]);
    if (view.job !== id) return; // another job was opened meanwhile
    renderJob(job, events.events, sent.deliveries);
    section.hidden = false;
    if (focus) {
      byId('job-status').textContent = '';
      byId('job-h').focus();
    }
  } catch (e) {
    byId('job-status').textContent = failure(e);
  }
}

// --- the webhook deliveries --------------------------------------------------------

async function refreshDeliveries() {
  try {
    const { deliveries } = await api.listDeliveries();
    const body = byId('hooks-body');
    redraw(body, JSON.stringify(deliveries), () => replace(body, deliveries.length
      ? deliveries.map((d) => hooks.row(d, (id) => openJob(id, true), redeliver))
      : el('tr', {}, el('td', { colspan: 8 }, 'No deliveries yet.'))));
  } catch (e) {
    byId('hooks-status').textContent = failure(e);
  }
}

async function redeliver(d, button) {
  button.disabled = true;
  const status = byId('hooks-status');
  try {
    await api.redeliver(d.delivery_id);
    status.textContent = `Redeliver: ${d.event} of job ${d.job_id} is due again.`;
    await refreshDeliveries();
  } catch (e) {
    status.textContent = failure(e);
    button.disabled = false;
  }
}

// --- the session --------------------------------------------------------------------

function tick() {
  if (view.operator) {
    operator.refresh();
    return;
  }
  refreshSummary();
  refreshDeliveries();
  if (view.cursor === null) refreshJobs(false);
  if (view.job && !byId('job').hidden) openJob(view.job, false);
}

async function signIn(event) {
  event.preventDefault();
  const input = byId('token');
  const error = byId('signin-error');
  const token = input.value.trim();
  input.value = ''; // not left in the page's form
  if (!token) return;
  api.signIn(token);
  try {
    view.operator = await isOperator();
  } catch (e) {
    api.signOut();
    error.textContent = e instanceof api.ApiError && e.status === 401
      ? 'That token is not valid.' : failure(e);
    input.focus();
    return;
  }
  error.textContent = '';
  show(true);
  byId('main').focus();
  tick();
  view.timer = setInterval(tick, REFRESH_MS);
}

// A tenant's token reads its stats; the operator's is no tenant's (401 there) and
// reads /v1/admin, which answers any other token 404.
async function isOperator() {
  try {
    await api.getStats();
    return false;
  } catch (e) {
    if (!(e instanceof api.ApiError) || e.status !== 401) throw e;
    try {
      await api.adminQueues();
      return true;
    } catch {
      throw e;
    }
  }
}

function signOut(message) {
  api.signOut();
  clearInterval(view.timer);
  Object.assign(view, { filters: {}, cursor: null, newer: [], next: null, job: null, timer: null });
  for (const id of ['queue-body', 'queue-news', 'audit-body', 'job-facts', 'job-actions',
                    'hooks-body', 'hooks-status']) {
    replace(byId(id));
  }
  shown.clear();
  replace(byId('jobs-table').tBodies[0]);
  replace(byId('events-table').tBodies[0]);
  byId('job').hidden = true;
  operator.clear();
  view.operator = false;
  show(false);
  byId('signin-error').textContent = typeof message === 'string' ? message : '';
  byId('token').focus();
}

function start() {
  byId('signin-form').addEventListener('submit', signIn);
  byId('sign-out').addEventListener('click', () => signOut(''));
  byId('filters').addEventListener('submit', applyFilters);
  byId('f-clear').addEventListener('click', (event) => {
    byId('filters').reset();
    applyFilters(event);
  });
  byId('older').addEventListener('click', () => {
    if (!view.next) return;
    view.newer.push(view.cursor);
    view.cursor = view.next;
    refreshJobs(true);
  });
  byId('newer').addEventListener('click', () => {
    if (!view.newer.length) return;
    view.cursor = view.newer.pop();
    refreshJobs(true);
  });
  byId('job-close').addEventListener('click', () => {
    byId('job').hidden = true;
    view.job = null;
    const first = document.querySelector('#jobs-table button');
    if (first) first.focus();
  });
  operator.start();
  show(false);
  byId('token').focus();
}

start();
