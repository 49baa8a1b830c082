// webchart: line charts with event markers and a heat map, drawn as inline
// SVG. No dependencies, no network.
var webchart = (function () {
  // The SVG namespace, taken from the parser so the page names no URL.
  var NS = (function () { var d = document.createElement('div'); d.innerHTML = '<svg></svg>'; return d.firstChild.namespaceURI; })();
  var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  var MARK = {split: '#2ca02c', merge: '#9467bd', move: '#ff7f0e', 'leader-transfer': '#17becf', 're-replicate': '#8c564b', 'server-down': '#d62728', 'server-up': '#1f77b4'};
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    if (v >= 10000) return (v / 1000).toFixed(0) + 'k';
    if (v >= 1000) return (v / 1000).toFixed(1) + 'k';
    if (v >= 10 || v === 0) return v.toFixed(0);
    return v.toFixed(v >= 1 ? 1 : 2);
  }
  function clear(host) { while (host.firstChild) host.removeChild(host.firstChild); }
  // lineChart draws spec = {title, unit, xLabel(x) -> string, series: [{name,
  // points: [[x, y]]}], markers: [{x, kind, label}]} into host.
  function lineChart(host, spec) {
    clear(host);
    var W = host.clientWidth || 640, H = spec.height || 180, L = 48, R = 10, T = 22, B = 22;
    var svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'class': 'chart'}, host);
    el('text', {x: L, y: 14, 'font-size': 12, 'font-weight': 'bold'}, svg).textContent = spec.title + (spec.unit ? ' (' + spec.unit + ')' : '');
    var x0 = Infinity, x1 = -Infinity, y1 = 0;
    spec.series.forEach(function (s) { s.points.forEach(function (p) { x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0]); y1 = Math.max(y1, p[1]); }); });
    (spec.markers || []).forEach(function (m) { x0 = Math.min(x0, m.x); x1 = Math.max(x1, m.x); });
    if (!isFinite(x0)) { x0 = 0; x1 = 1; }
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= 0) y1 = 1;
    y1 *= 1.1;
    var sx = function (x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
    var sy = function (y) { return H - B - y / y1 * (H - T - B); };
    el('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#999'}, svg);
    el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#999'}, svg);
    for (var i = 0; i <= 4; i++) {
      var yv = y1 * i / 4;
      el('text', {x: L - 4, y: sy(yv) + 4, 'font-size': 10, 'text-anchor': 'end'}, svg).textContent = fmt(yv);
      if (i) el('line', {x1: L, y1: sy(yv), x2: W - R, y2: sy(yv), stroke: '#eee'}, svg);
      var xv = x0 + (x1 - x0) * i / 4;
      el('text', {x: sx(xv), y: H - 6, 'font-size': 10, 'text-anchor': i === 4 ? 'end' : i === 0 ? 'start' : 'middle'}, svg).textContent = spec.xLabel ? spec.xLabel(xv) : fmt(xv);
    }
    (spec.markers || []).forEach(function (m) {
      var ln = el('line', {x1: sx(m.x), y1: T, x2: sx(m.x), y2: H - B, stroke: MARK[m.kind] || '#aaa', 'stroke-dasharray': '3,2', 'class': 'marker'}, svg);
      el('title', {}, ln).textContent = m.label;
    });
    spec.series.forEach(function (s, i) {
      var c = s.color || COLORS[i % COLORS.length];
      var d = s.points.map(function (p, j) { return (j ? 'L' : 'M') + sx(p[0]).toFixed(1) + ',' + sy(p[1]).toFixed(1); }).join('');
      if (d) el('path', {d: d, fill: 'none', stroke: c, 'stroke-width': 1.5, 'class': 'series', 'data-points': s.points.length}, svg);
      var lx = L + 8 + i * 110;
      el('rect', {x: lx, y: T - 2, width: 10, height: 3, fill: c}, svg);
      el('text', {x: lx + 14, y: T + 2, 'font-size': 10}, svg).textContent = s.name;
    });
    return svg;
  }
  // heatMap draws spec = {title, columns: [{x, cells: [{lo, hi, v, label}]}]}
  // where lo/hi are positions in [0, 1] of key space and v the load.
  function heatMap(host, spec) {
    clear(host);
    var W = host.clientWidth || 640, H = spec.height || 220, L = 48, R = 10, T = 22, B = 22;
    var svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'class': 'chart heatmap'}, host);
    el('text', {x: L, y: 14, 'font-size': 12, 'font-weight': 'bold'}, svg).textContent = spec.title;
    var cols = spec.columns, vmax = 0;
    cols.forEach(function (c) { c.cells.forEach(function (k) { vmax = Math.max(vmax, k.v); }); });
    if (vmax <= 0) vmax = 1;
    var cw = (W - L - R) / Math.max(cols.length, 1);
    el('text', {x: L - 4, y: T + 8, 'font-size': 10, 'text-anchor': 'end'}, svg).textContent = 'key lo';
    el('text', {x: L - 4, y: H - B, 'font-size': 10, 'text-anchor': 'end'}, svg).textContent = 'key hi';
    cols.forEach(function (c, i) {
      c.cells.forEach(function (k) {
        var t = Math.sqrt(k.v / vmax);
        var r = el('rect', {x: L + i * cw, y: T + k.lo * (H - T - B), width: Math.max(cw, 1), height: Math.max((k.hi - k.lo) * (H - T - B), 1),
          fill: 'rgb(' + Math.round(255 * t) + ',' + Math.round(60 + 120 * (1 - t)) + ',' + Math.round(255 * (1 - t)) + ')', 'class': 'cell'}, svg);
        el('title', {}, r).textContent = k.label + ': ' + fmt(k.v) + ' entities/s';
      });
    });
    if (spec.xLabel && cols.length) {
      el('text', {x: L, y: H - 6, 'font-size': 10}, svg).textContent = spec.xLabel(cols[0].x);
      el('text', {x: W - R, y: H - 6, 'font-size': 10, 'text-anchor': 'end'}, svg).textContent = spec.xLabel(cols[cols.length - 1].x);
    }
    return svg;
  }
  return {lineChart: lineChart, heatMap: heatMap, markColors: MARK};
})();
