// weir lab report: draws every svg.chart element from the JSON in #lab-data, then marks
// the body with data-charts-drawn="N" (the number of charts drawn). Self-contained: no
// library, no network. Each line is a <path class="series" data-points="N">, each bar a
// <rect class="bar">.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var W = 720, H = 310, M = { left: 64, right: 16, top: 16, bottom: 78 };
  var COLORS = {
    weir: "#1f77b4", weirOrigin: "#6baed6", direct: "#d62728", directOrigin: "#ff9896",
    haproxy: "#2ca02c", nginx: "#9467bd", started: "#999999"
  };

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var key in attrs) { node.setAttribute(key, attrs[key]); }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function text(parent, x, y, content, attrs) {
    var node = el("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    node.textContent = content;
    return node;
  }

  function niceMax(value) {
    if (!(value > 0)) { return 1; }
    var power = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * power >= value) { return steps[i] * power; }
    }
    return 10 * power;
  }

  function niceStep(value) {
    var power = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * power >= value) { return steps[i] * power; }
    }
    return 10 * power;
  }

  function fmt(value) {
    if (Math.abs(value) >= 1000) { return Math.round(value).toLocaleString("en-US"); }
    if (Math.abs(value) >= 10 || value === 0) { return String(Math.round(value * 10) / 10); }
    return String(Math.round(value * 1000) / 1000);
  }

  function frame(svg, xMax, yMax, xLabel, yLabel) {
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    var plotW = W - M.left - M.right, plotH = H - M.top - M.bottom;
    var x = function (v) { return M.left + (v / xMax) * plotW; };
    var y = function (v) { return M.top + plotH - (v / yMax) * plotH; };
    var axes = el("g", { "class": "axes" }, svg);
    for (var i = 0; i <= 5; i++) {
      var yv = (yMax * i) / 5;
      el("line", { x1: M.left, x2: M.left + plotW, y1: y(yv), y2: y(yv), "class": "grid" }, axes);
      text(axes, M.left - 6, y(yv) + 4, fmt(yv), { "text-anchor": "end" });
    }
    if (xMax > 0) {
      // Ticks at a round step (1, 2 or 5 × 10^k), about six of them, up to the last sample.
      var step = niceStep(xMax / 6);
      for (var xv = 0; xv <= xMax + 1e-9; xv += step) {
        text(axes, x(xv), M.top + plotH + 16, fmt(xv), { "text-anchor": "middle" });
      }
    }
    el("line", { x1: M.left, x2: M.left, y1: M.top, y2: M.top + plotH, "class": "axis" }, axes);
    el("line", { x1: M.left, x2: M.left + plotW, y1: M.top + plotH, y2: M.top + plotH, "class": "axis" }, axes);
    if (xLabel) { text(axes, M.left + plotW / 2, M.top + plotH + 32, xLabel, { "text-anchor": "middle" }); }
    text(axes, 14, M.top + plotH / 2, yLabel, {
      "text-anchor": "middle", transform: "rotate(-90 14 " + (M.top + plotH / 2) + ")"
    });
    return { x: x, y: y, plotW: plotW, plotH: plotH };
  }

  // Entries in rows under the plot, wrapped at the chart's width.
  function legend(svg, entries) {
    var g = el("g", { "class": "legend" }, svg);
    var left = M.left, row = 0;
    entries.forEach(function (entry) {
      var width = 28 + 6.5 * entry.name.length;
      if (left + width > W - M.right && left > M.left) { left = M.left; row++; }
      var top = H - 34 + 16 * row;
      el("rect", { x: left, y: top, width: 12, height: 12, fill: entry.color }, g);
      text(g, left + 16, top + 10, entry.name);
      left += width;
    });
  }

  // series: [{ name, color, points: [[x, y], ...], dashed }]
  function lineChart(svg, series, xLabel, yLabel) {
    var drawn = series.filter(function (s) { return s.points.length > 0; });
    if (drawn.length === 0) { return false; }
    var xMax = 0, yMax = 0;
    drawn.forEach(function (s) {
      s.points.forEach(function (p) { xMax = Math.max(xMax, p[0]); yMax = Math.max(yMax, p[1]); });
    });
    // Time runs to the last sample exactly; values get a round ceiling.
    var f = frame(svg, xMax || 1, niceMax(yMax * 1.05), xLabel, yLabel);
    drawn.forEach(function (s) {
      var d = s.points.map(function (p, i) {
        return (i === 0 ? "M" : "L") + f.x(p[0]).toFixed(1) + "," + f.y(p[1]).toFixed(1);
      }).join(" ");
      var attrs = { d: d, stroke: s.color, fill: "none", "class": "series", "data-series": s.name, "data-points": s.points.length };
      if (s.dashed) { attrs["stroke-dasharray"] = "6 4"; }
      el("path", attrs, svg);
    });
    legend(svg, drawn);
    return true;
  }

  // groups: [{ label, bars: [{ name, value, color }] }]
  function barChart(svg, groups, yLabel) {
    var yMax = 0, names = [], colors = {};
    groups.forEach(function (g) {
      g.bars.forEach(function (b) {
        if (b.value === null || b.value === undefined) { return; }
        yMax = Math.max(yMax, b.value);
        if (names.indexOf(b.name) < 0) { names.push(b.name); colors[b.name] = b.color; }
      });
    });
    if (names.length === 0) { return false; }
    var f = frame(svg, 0, niceMax(yMax * 1.05), "", yLabel);
    var slot = f.plotW / groups.length;
    var width = Math.max(4, (slot * 0.8) / names.length);
    groups.forEach(function (g, gi) {
      var left = M.left + gi * slot + slot * 0.1;
      g.bars.forEach(function (b, bi) {
        if (b.value === null || b.value === undefined) { return; }
        var top = f.y(b.value);
        el("rect", {
          x: left + bi * width, y: top, width: width - 2, height: M.top + f.plotH - top,
          fill: b.color, "class": "bar", "data-value": b.value
        }, svg);
      });
      text(svg, M.left + gi * slot + slot / 2, M.top + f.plotH + 16, g.label, { "text-anchor": "middle", "class": "group" });
    });
    legend(svg, names.map(function (n) { return { name: n, color: colors[n] }; }));
    return true;
  }

  function points(samples, field, scale) {
    return (samples || []).filter(function (s) {
      return s[field] !== null && s[field] !== undefined;
    }).map(function (s) { return [s.t_s, s[field] * (scale || 1)]; });
  }

  // The per-second rate of a counter that only grows (requests, errors, CPU seconds).
  function perSecond(samples, field, scale) {
    var out = [];
    for (var i = 1; i < (samples || []).length; i++) {
      var dt = samples[i].t_s - samples[i - 1].t_s;
      var a = samples[i - 1][field], b = samples[i][field];
      if (dt > 0 && typeof a === "number" && typeof b === "number") {
        out.push([samples[i].t_s, Math.max(0, b - a) / dt * (scale || 1)]);
      }
    }
    return out;
  }

  var data = JSON.parse(document.getElementById("lab-data").textContent);
  var offload = data.offload, tls = data.tls, suite = data.suite;
  var direct = offload && offload.direct ? offload.direct.samples : [];
  var weir = offload ? offload.weir.samples : [];
  var KIB_TO_MIB = 1 / 1024;

  var charts = {
    connections: function (svg) {
      return lineChart(svg, [
        { name: "clients held, through weir", color: COLORS.weir, points: points(weir, "clients_held") },
        { name: "origin connections, through weir", color: COLORS.weirOrigin, points: points(weir, "origin_connections") },
        { name: "clients held, direct", color: COLORS.direct, points: points(direct, "clients_held") },
        { name: "origin connections, direct", color: COLORS.directOrigin, points: points(direct, "origin_connections"), dashed: true }
      ], "seconds from the start of the load", "connections");
    },
    rate: function (svg) {
      return lineChart(svg, [
        { name: "through weir", color: COLORS.weir, points: perSecond(weir, "requests_ok") },
        { name: "direct", color: COLORS.direct, points: perSecond(direct, "requests_ok") }
      ], "seconds from the start of the load", "requests/s served");
    },
    latency: function (svg) {
      return lineChart(svg, [
        { name: "through weir", color: COLORS.weir, points: points(weir, "connect_ms_p99") },
        { name: "direct", color: COLORS.direct, points: points(direct, "connect_ms_p99") }
      ], "seconds from the start of the load", "connect p99, ms");
    },
    errors: function (svg) {
      return lineChart(svg, [
        { name: "through weir", color: COLORS.weir, points: perSecond(weir, "errors") },
        { name: "direct", color: COLORS.direct, points: perSecond(direct, "errors") }
      ], "seconds from the start of the load", "client errors per second");
    },
    cpu: function (svg) {
      return lineChart(svg, [
        { name: "origin, through weir", color: COLORS.weir, points: perSecond(weir, "origin_cpu_s", 100) },
        { name: "origin, direct", color: COLORS.direct, points: perSecond(direct, "origin_cpu_s", 100) }
      ], "seconds from the start of the load", "origin CPU, % of one core");
    },
    memory: function (svg) {
      return lineChart(svg, [
        { name: "origin, through weir", color: COLORS.weir, points: points(weir, "origin_rss_kib", KIB_TO_MIB) },
        { name: "origin, direct", color: COLORS.direct, points: points(direct, "origin_rss_kib", KIB_TO_MIB) },
        { name: "weir", color: COLORS.weirOrigin, points: points(weir, "proxy_rss_kib", KIB_TO_MIB), dashed: true }
      ], "seconds from the start of the load", "resident memory, MiB");
    },
    "tls-cpu": function (svg) {
      return barChart(svg, [
        { label: "origin CPU s", bars: [
          { name: "origin serves HTTPS", value: tls.direct.origin_cpu_s, color: COLORS.direct },
          { name: "origin behind weir", value: tls.offloaded.origin_cpu_s, color: COLORS.weir },
          { name: "weir (TLS)", value: tls.offloaded.proxy_cpu_s, color: COLORS.weirOrigin }
        ] }
      ], "CPU seconds");
    },
    "tls-memory": function (svg) {
      return barChart(svg, [
        { label: "peak memory (VmHWM)", bars: [
          { name: "origin serves HTTPS", value: tls.direct.origin_memory_peak_kib * KIB_TO_MIB, color: COLORS.direct },
          { name: "origin behind weir", value: tls.offloaded.origin_memory_peak_kib * KIB_TO_MIB, color: COLORS.weir },
          { name: "weir (TLS)", value: (tls.offloaded.proxy_memory_peak_kib || 0) * KIB_TO_MIB, color: COLORS.weirOrigin }
        ] }
      ], "MiB");
    },
    suite: function (svg) {
      var groups = suite.rows.filter(function (row) {
        return row.values.length > 0 && row.values[0] !== null && row.values[0] > 0;
      }).map(function (row) {
        return {
          label: row.name.replace(/ \(.*\)$/, ""),
          bars: suite.targets.map(function (target, i) {
            var value = row.values[i];
            return { name: target.name, value: value === null ? null : value / row.values[0], color: COLORS[target.name] || "#8c564b" };
          })
        };
      });
      return barChart(svg, groups, "relative to direct (direct = 1)");
    }
  };

  var count = 0;
  Array.prototype.forEach.call(document.querySelectorAll("svg.chart"), function (svg) {
    var draw = charts[svg.getAttribute("data-chart")];
    if (draw && draw(svg)) {
      svg.setAttribute("data-drawn", "true");
      count++;
    }
  });
  document.body.setAttribute("data-charts-drawn", String(count));
})();
