// Building the page from API data: text goes in as text nodes (textContent), never
// as markup, so nothing an API answer holds can become an element or a script.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    // Event handlers are attached in code, and styles come from the style sheet.
    if (name.startsWith('on') || name === 'style') throw new Error(`refused attribute ${name}`);
    node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function replace(node, ...children) {
  node.replaceChildren();
  build(node, {}, children);
}

export function byId(id) {
  return document.getElementById(id);
}

export function ms(value) {
  if (value === null || value === undefined) return '–';
  if (value < 1000) return `${value.toFixed(value < 10 ? 1 : 0)} ms`;
  if (value < 60000) return `${(value / 1000).toFixed(1)} s`;
  return `${(value / 60000).toFixed(1)} min`;
}

export function age(seconds) {
  if (seconds === null || seconds === undefined) return '–';
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

export function time(rfc3339) {
  const d = new Date(rfc3339);
  return Number.isNaN(d.getTime()) ? String(rfc3339) : d.toLocaleString();
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}
