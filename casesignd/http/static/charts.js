// The two charts, drawn as inline SVG from GET /v1/stats: no chart library, nothing
// fetched. Colours come from classes in the style sheet (the CSP allows no inline
// style), and each chart carries a text summary for screen readers.

import { svg, ms } from './dom.js';

const W = 640;
const H = 220;
const PAD = { left: 64, right: 12, top: 12, bottom: 28 };

// The bucket slots of the window, oldest first, each with its bucket or null.
function slots(stats) {
  const since = Date.parse(stats.since);
  const count = Math.ceil((Date.parse(stats.at) - since) / (stats.bucket_s * 1000));
  const out = new Array(Math.max(count, 1)).fill(null);
  for (const b of stats.buckets) {
    const i = Math.floor((Date.parse(b.start) - since) / (stats.bucket_s * 1000));
    if (i >= 0 && i < out.length) out[i] = b;
  }
  return out;
}

function frame(captionId, summary, yMax, yLabel) {
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img',
                            'aria-labelledby': captionId, 'aria-describedby': `${captionId}-d`,
                            class: 'plot', preserveAspectRatio: 'xMidYMid meet' });
  root.append(svg('desc', { id: `${captionId}-d` }, summary));
  const plotH = H - PAD.top - PAD.bottom;
  for (const f of [0, 0.5, 1]) {
    const y = PAD.top + plotH * (1 - f);
    root.append(svg('line', { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: 'grid' }));
    root.append(svg('text', { x: PAD.left - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' },
                    yLabel(yMax * f)));
  }
  const base = H - PAD.bottom;
  for (const [frac, label] of [[0, '−60 min'], [0.5, '−30 min'], [1, 'now']]) {
    const x = PAD.left + (W - PAD.left - PAD.right) * frac;
    root.append(svg('text', { x, y: base + 18, class: 'tick',
                              'text-anchor': frac === 0 ? 'start' : frac === 1 ? 'end' : 'middle' },
                    label));
  }
  return root;
}

function scale(yMax) {
  const plotH = H - PAD.top - PAD.bottom;
  return (v) => (yMax > 0 ? (v / yMax) * plotH : 0);
}

// One stacked bar per bucket: a segment per key, of height h(value(bucket, key)),
// and then whatever ``more`` draws over it.
function stack(root, all, keys, value, h, more) {
  const slotW = (W - PAD.left - PAD.right) / all.length;
  all.forEach((b, i) => {
    if (!b) return;
    const x = PAD.left + i * slotW + slotW * 0.1;
    let y = H - PAD.bottom;
    for (const k of keys) {
      const height = h(value(b, k));
      y -= height;
      root.append(svg('rect', { x, y, width: slotW * 0.8, height, class: `s-${k}` }));
    }
    if (more) more(b, x, slotW * 0.8);
  });
}

// Stacked bars of each phase's mean, and a mark at each minute's longest total.
export function phases(stats, captionId) {
  const all = slots(stats);
  const parts = ['admission', 'queue_wait', 'processing'];
  let yMax = 0;
  for (const b of all) {
    if (!b) continue;
    yMax = Math.max(yMax, b.total_ms.max, parts.reduce((s, p) => s + b[`${p}_ms`].mean, 0));
  }
  const ran = stats.buckets.reduce((s, b) => s + b.ready + b.failed, 0);
  const worst = stats.buckets.reduce((m, b) => Math.max(m, b.total_ms.max), 0);
  const summary = ran
    ? `${ran} jobs ran to an end in the hour; the longest took ${ms(worst)} in all.`
    : 'No job ended in the hour.';
  const root = frame(captionId, summary, yMax, ms);
  const h = scale(yMax);
  stack(root, all, parts, (b, p) => b[`${p}_ms`].mean, h, (b, x, width) => {
    const ty = H - PAD.bottom - h(b.total_ms.max);
    root.append(svg('rect', { x, y: ty - 1.5, width, height: 3, class: 's-total' }));
  });
  return root;
}

// Stacked bars of the jobs that ended each minute, by how they ended.
export function ended(stats, captionId) {
  const all = slots(stats);
  const kinds = ['ready', 'failed', 'canceled'];
  const yMax = Math.max(1, ...all.map((b) => (b ? b.ready + b.failed + b.canceled : 0)));
  const e = stats.ended;
  const summary = `In the hour: ${e.ready} ready, ${e.failed} failed, ${e.canceled} canceled.`;
  const root = frame(captionId, summary, yMax, (v) => String(Math.round(v)));
  stack(root, all, kinds, (b, k) => b[k], scale(yMax));
  return root;
}

// The hour's mean and longest of each clock, over its ready and failed jobs.
export function clockRows(stats) {
  const clocks = [['admission', 'Admission'], ['queue_wait', 'Queue wait'],
                  ['processing', 'Processing'], ['total', 'Total']];
  const n = stats.buckets.reduce((s, b) => s + b.ready + b.failed, 0);
  return clocks.map(([key, label]) => {
    let sum = 0;
    let max = 0;
    for (const b of stats.buckets) {
      const ran = b.ready + b.failed;
      sum += b[`${key}_ms`].mean * ran;
      max = Math.max(max, b[`${key}_ms`].max);
    }
    return [label, n ? ms(sum / n) : '–', n ? ms(max) : '–'];
  });
}
