// Webhook deliveries: the tenant's newest with what each came to, and a button to send
// one again. Every value is set as text (dom.js), as everywhere on the page.

import { el, time } from './dom.js';

// What the receiver last answered: its status, or why there was no answer.
export function lastAnswer(d) {
  if (d.last_status) return `HTTP ${d.last_status}`;
  return d.last_error || '–';
}

// One line of a job's facts: what was sent where, and what it came to.
export function summary(d) {
  const times = d.attempts === 1 ? 'attempt' : 'attempts';
  return `${d.event} to ${d.endpoint}: ${d.state} (${d.attempts} ${times}, ${lastAnswer(d)})`;
}

// A row of the deliveries table. ``open(jobId)`` shows the job; ``redeliver(d, button)``
// sends it again (offered once it ended: a pending one is on its way already).
export function row(d, open, redeliver) {
  const job = el('button', { type: 'button', class: 'link', 'data-key': `job-${d.delivery_id}`,
                             'aria-label': `Open job ${d.job_id}` }, d.job_id);
  job.addEventListener('click', () => open(d.job_id));
  let action = '–';
  if (d.state !== 'pending') {
    action = el('button', { type: 'button', class: 'act', 'data-delivery': d.delivery_id,
                            'data-key': `redeliver-${d.delivery_id}`,
                            'aria-label': `Redeliver ${d.event} of job ${d.job_id}` },
                'Redeliver');
    action.addEventListener('click', () => redeliver(d, action));
  }
  return el('tr', { 'data-state': d.state, 'data-delivery': d.delivery_id },
    el('td', { class: 'mono' }, job), el('td', {}, d.event), el('td', {}, d.endpoint),
    el('td', {}, el('span', { class: `state dl-${d.state}` }, d.state)),
    el('td', { class: 'num' }, d.attempts),
    el('td', {}, d.next_attempt_at ? time(d.next_attempt_at) : '–'),
    el('td', {}, lastAnswer(d)), el('td', {}, action));
}
