// The daemon's public API, from this page. The token lives in this module's memory
// only: never in storage, a cookie or the URL, so it goes when the page does.

let token = null;

export class ApiError extends Error {
  constructor(status, code, message, correlationId) {
    super(message);
    this.status = status;
    this.code = code;
    this.correlationId = correlationId;
  }
}

export function signIn(value) {
  token = value;
}

export function signOut() {
  token = null;
}

export function signedIn() {
  return token !== null;
}

// One call: JSON in and out; an error answer becomes an ApiError with its code.
export async function call(method, path, body) {
  if (token === null) throw new ApiError(401, 'unauthorized', 'not signed in', '');
  const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
  const init = { method, headers, credentials: 'omit', cache: 'no-store',
                 referrerPolicy: 'no-referrer', redirect: 'error' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const e = (data && data.error) || {};
    throw new ApiError(response.status, e.code || `http_${response.status}`,
                       e.message || response.statusText, e.correlation_id || '');
  }
  return data;
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const getStats = () => call('GET', '/v1/stats?window_s=3600');
export const getAudit = () => call('GET', '/v1/audit/head');
export const listJobs = (filters, cursor) =>
  call('GET', `/v1/jobs${query({ ...filters, limit: 20, cursor })}`);
export const getJob = (id) => call('GET', `/v1/jobs/${encodeURIComponent(id)}`);
export const getEvents = (id) => call('GET', `/v1/jobs/${encodeURIComponent(id)}/events`);
export const retryJob = (id) => call('POST', `/v1/jobs/${encodeURIComponent(id)}/retry`);
export const cancelJob = (id) => call('POST', `/v1/jobs/${encodeURIComponent(id)}/cancel`);
export const listDeliveries = (jobId) =>
  call('GET', `/v1/webhooks/deliveries${query({ limit: 20, job_id: jobId })}`);
export const redeliver = (id) =>
  call('POST', `/v1/webhooks/deliveries/${encodeURIComponent(id)}/redeliver`);

// The operator's reads and changes (/v1/admin): the operator's token alone reaches them.
export const adminQueues = () => call('GET', '/v1/admin/queues');
export const adminNodes = () => call('GET', '/v1/admin/nodes');
export const adminJobs = (filters) =>
  call('GET', `/v1/admin/dead-letter${query({ ...filters, limit: 50 })}`);
export const adminRetry = (ids) => call('POST', '/v1/admin/jobs/retry', { job_ids: ids });
export const adminCancel = (ids) => call('POST', '/v1/admin/jobs/cancel', { job_ids: ids });
export const adminPause = (tenant, kind) =>
  call('POST', '/v1/admin/pause', { tenant: tenant || null, kind: kind || null });
export const adminResume = (tenant, kind) =>
  call('POST', '/v1/admin/resume', { tenant: tenant || null, kind: kind || null });
