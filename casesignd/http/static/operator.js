// The operator's part of the console, shown when the operator's token signs in: the
// queues of every tenant, the pauses, the nodes, and the dead letter with bulk retry
// and cancel. Every value comes from /v1/admin and is set as text.

import * as api from './api.js';
import { age, byId, el, replace, time } from './dom.js';

const view = { filters: { state: 'failed' }, tenants: [], report: null };

function describe(e) {
  if (e instanceof api.ApiError) {
    const cid = e.correlationId ? ` (correlation id ${e.correlationId})` : '';
    return `${e.code}: ${e.message}${cid}`;
  }
  return `The daemon cannot be reached: ${e.message}`;
}

function pauseWords(p) {
  return `${p.tenant ? `tenant ${p.tenant}` : 'every tenant'}, ${p.kind ? `kind ${p.kind}` : 'every kind'}`;
}

// The tenant pickers list the configured tenants; a choice made stays chosen.
function fillTenants(names) {
  if (JSON.stringify(names) === JSON.stringify(view.tenants)) return;
  view.tenants = names;
  for (const id of ['p-tenant', 'd-tenant']) {
    const select = byId(id);
    const chosen = select.value;
    replace(select, el('option', { value: '' }, 'every tenant'),
            names.map((n) => el('option', { value: n }, n)));
    select.value = names.includes(chosen) ? chosen : '';
  }
}

function renderQueues(found) {
  fillTenants(found.tenants.map((t) => t.tenant));
  const rows = found.queues.map((q) => el('tr', { 'data-tenant': q.tenant, 'data-kind': q.kind },
    el('th', { scope: 'row' }, q.tenant), el('td', {}, q.kind),
    el('td', { class: 'num' }, q.queued), el('td', { class: 'num' }, q.retry_wait),
    el('td', { class: 'num' }, q.running), el('td', { class: 'num' }, q.failed),
    el('td', { class: 'num' }, age(q.oldest_wait_s))));
  replace(byId('op-queues-body'), rows.length ? rows
    : el('tr', {}, el('td', { colspan: 7 }, 'No job is queued, running or failed.')));
  replace(byId('op-pause-list'), found.pauses.length
    ? found.pauses.map((p) => el('li', { 'data-tenant': p.tenant || '', 'data-kind': p.kind || '' },
      `${pauseWords(p)}: paused since ${time(p.since)} by ${p.actor}`))
    : el('li', {}, 'No claims are paused.'));
  byId('op-updated').textContent = `Updated ${new Date().toLocaleTimeString()}.`;
}

function renderNodes(found) {
  replace(byId('op-nodes-body'), found.nodes.map((n) => el('tr', {},
    el('th', { scope: 'row' }, n.node), el('td', {}, n.connected ? 'yes' : 'no'),
    el('td', { class: 'num' }, n.leases),
    el('td', {}, n.last_heartbeat_at ? time(n.last_heartbeat_at) : '–'))));
}

function selected() {
  return [...document.querySelectorAll('#op-dead-body input[type=checkbox]:checked')]
    .map((box) => box.dataset.job);
}

function renderJobs(found) {
  const keep = new Set(selected());
  replace(byId('op-dead-body'), found.jobs.length ? found.jobs.map((j) => el('tr', { 'data-job': j.job_id },
    el('td', {}, el('input', { type: 'checkbox', 'data-job': j.job_id, 'data-key': `sel-${j.job_id}`,
                               'aria-label': `Select job ${j.job_id}`, checked: keep.has(j.job_id) })),
    el('td', { class: 'mono' }, j.job_id), el('td', {}, j.tenant), el('td', {}, j.kind),
    el('td', {}, j.error ? j.error.code : '–'), el('td', { class: 'num' }, j.attempts),
    el('td', {}, time(j.updated_at))))
    : el('tr', {}, el('td', { colspan: 7 }, 'No job of this choice.')));
  byId('d-all').checked = false;
  byId('d-retry').disabled = view.filters.state !== 'failed';
  byId('d-cancel').disabled = view.filters.state !== 'queued';
}

export async function refresh() {
  try {
    const [queues, nodes, jobs] = await Promise.all([
      api.adminQueues(), api.adminNodes(), api.adminJobs(view.filters)]);
    renderQueues(queues);
    renderNodes(nodes);
    renderJobs(jobs);
  } catch (e) {
    byId('op-dead-status').textContent = describe(e);
  }
}

async function change(verb, label) {
  const ids = selected();
  const status = byId('op-dead-status');
  if (!ids.length) {
    status.textContent = 'Select the jobs first.';
    return;
  }
  try {
    const result = await verb(ids);
    const refused = result.refused.map((r) => `${r.job_id} (${r.code})`).join(', ');
    status.textContent = `${label}: ${result.done.length} of ${ids.length} done.`
      + (refused ? ` Refused: ${refused}.` : '');
  } catch (e) {
    status.textContent = describe(e);
  }
  await refresh();
}

async function pause(resume) {
  const tenant = byId('p-tenant').value;
  const kindInput = byId('p-kind');
  if (!kindInput.checkValidity()) {
    kindInput.reportValidity();
    return;
  }
  const kind = kindInput.value.trim();
  const status = byId('op-pause-status');
  try {
    const result = await (resume ? api.adminResume : api.adminPause)(tenant, kind);
    const words = pauseWords({ tenant, kind });
    if (resume) status.textContent = result.changed ? `Resumed: ${words}.` : `No such pause: ${words}.`;
    else status.textContent = result.changed ? `Paused: ${words}.` : `Already paused: ${words}.`;
  } catch (e) {
    status.textContent = describe(e);
  }
  await refresh();
}

export function clear() {
  for (const id of ['op-queues-body', 'op-nodes-body', 'op-dead-body', 'op-pause-list']) {
    replace(byId(id));
  }
  for (const id of ['op-pause-status', 'op-dead-status', 'op-updated']) byId(id).textContent = '';
  view.filters = { state: 'failed' };
  view.tenants = [];
  byId('op-dead-filters').reset();
  byId('op-pause-form').reset();
}

export function start() {
  byId('op-pause-form').addEventListener('submit', (event) => {
    event.preventDefault();
    pause(false);
  });
  byId('p-resume').addEventListener('click', () => pause(true));
  byId('op-dead-filters').addEventListener('submit', (event) => {
    event.preventDefault();
    const code = byId('d-code');
    if (!code.checkValidity()) {
      code.reportValidity();
      return;
    }
    view.filters = { state: byId('d-state').value, tenant: byId('d-tenant').value,
                     code: code.value.trim() };
    byId('op-dead-status').textContent = '';
    refresh();
  });
  byId('d-all').addEventListener('change', (event) => {
    for (const box of document.querySelectorAll('#op-dead-body input[type=checkbox]')) {
      box.checked = event.target.checked;
    }
  });
  byId('d-retry').addEventListener('click', () => change(api.adminRetry, 'Retry'));
  byId('d-cancel').addEventListener('click', () => change(api.adminCancel, 'Cancel'));
}
