/* perfgate report: draws the history's charts with uPlot from the JSON embedded in the page.
 * Every string from the history goes into the page through textContent or a checked href,
 * never through innerHTML. */
(function () {
  "use strict";

  var began = performance.now();
  var data = JSON.parse(document.getElementById("perfgate-data").textContent);
  var parsedMs = performance.now() - began;
  var runs = data.runs;
  var STATUS = data.statuses;
  var COLORS = {
    spec: "#2563eb", plain: "#6b7280", speedup: "#7c3aed", accept: "#0d9488",
    band: "rgba(37, 99, 235, 0.10)", bandLine: "rgba(37, 99, 235, 0.45)",
    fingerprint: "#a16207", regression: "#dc2626", improvement: "#16a34a", other: "#d97706",
  };
  var PHASES = [
    ["draft", "#93c5fd"], ["verify", "#1d4ed8"], ["draft_extend", "#a5b4fc"],
    ["accept", "#c4b5fd"], ["other", "#d1d5db"],
  ];
  var MAIN = ["spec.output_tok_s", "plain.output_tok_s", "spec.speedup", "spec.accept_length"];
  var UNITS = {
    output_tok_s: "tok/s", accept_length: "tok/cycle", speedup: "×", verify_ms: "ms",
    draft_ms: "ms", draft_extend_ms: "ms", cycle_ms: "ms", ttft_ms: "ms",
    serving_output_tok_s: "tok/s", ttft_ms_p50: "ms", ttft_ms_p99: "ms", itl_ms_p50: "ms", itl_ms_p99: "ms",
    sglang_output_tok_s: "tok/s", sglang_ttft_ms_p50: "ms", sglang_ttft_ms_p99: "ms",
    sglang_itl_ms_p50: "ms", sglang_itl_ms_p99: "ms",
  };
  var state = { scenario: "", profile: "", branch: "", x: "order", phases: "ms" };
  var live = [];          // the charts drawn now: {group, plot, el}
  var syncing = false;
  var report = (window.perfgateReport = {
    ready: false, complete: false, charts: live, build: 0, made: 0, drawn: 0, total: 0,
  });

  function text(node, value) { node.textContent = value == null ? "" : String(value); return node; }
  function make(tag, cls, value) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (value != null) text(node, value);
    return node;
  }
  function link(href, label) {
    // hrefs are built only from the repository URL (checked when the report was written)
    // and ids that match a strict pattern, or from CI URLs checked the same way.
    if (!href || !/^https?:\/\//.test(href)) return make("span", null, label);
    var a = make("a", null, label);
    a.href = href;
    a.rel = "noopener";
    return a;
  }
  function fmt(v) {
    if (v == null || !isFinite(v)) return "–";
    var a = Math.abs(v);
    return a >= 1000 ? v.toFixed(0) : a >= 100 ? v.toFixed(1) : a >= 10 ? v.toFixed(2) : v.toFixed(3);
  }
  function pct(v) { return (v >= 0 ? "+" : "") + (v * 100).toFixed(1) + "%"; }
  function when(i) {
    return new Date((runs.t0 + runs.t[i]) * 1000).toISOString().slice(0, 16).replace("T", " ");
  }
  function commitHref(i) {
    var c = runs.commit[i];
    return data.repository && c && /^[0-9a-f]{7,64}$/i.test(c) ? data.repository + "/commit/" + c : null;
  }
  function prHref(i) {
    var pr = runs.pr[i];
    return data.repository && pr && /^[0-9]{1,10}$/.test(pr) ? data.repository + "/pull/" + pr : null;
  }
  function ciHref(i) {
    var ci = runs.ci[i];
    if (!ci) return null;
    return ci.charAt(0) === "~" ? runs.ciPrefix + ci.slice(1) : ci;
  }

  /* The positions (within a group) of the runs the filters keep. */
  function selection(group) {
    var keep = [];
    var branch = state.branch === "" ? -1 : data.branches.indexOf(state.branch);
    for (var p = 0; p < group.runs.length; p++) {
      if (branch < 0 || runs.branch[group.runs[p]] === branch) keep.push(p);
    }
    return keep;
  }
  function pick(values, keep) {
    var out = new Array(keep.length);
    for (var k = 0; k < keep.length; k++) out[k] = values ? values[keep[k]] : null;
    return out;
  }
  function expandBand(steps, count) {
    var low = new Array(count), high = new Array(count), s = 0;
    for (var p = 0; p < count; p++) {
      while (s + 1 < steps.length && steps[s + 1][0] <= p) s++;
      low[p] = steps[s][0] <= p ? steps[s][1] : null;
      high[p] = steps[s][0] <= p ? steps[s][2] : null;
    }
    return [low, high];
  }

  /* Marks drawn over a chart: verdicts, change points, fingerprint changes, reused twins. */
  function drawMarks(u, spec) {
    var ctx = u.ctx, box = u.bbox, dpr = window.devicePixelRatio || 1;
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.left, box.top, box.width, box.height);
    ctx.clip();
    ctx.font = Math.round(10 * dpr) + "px system-ui, sans-serif";
    spec.lines.forEach(function (line) {
      var x = u.valToPos(u.data[0][line.at], "x", true);
      ctx.strokeStyle = line.color;
      ctx.fillStyle = line.color;
      ctx.lineWidth = dpr * (line.dash ? 1 : 1.5);
      ctx.setLineDash(line.dash ? [4 * dpr, 3 * dpr] : []);
      ctx.beginPath();
      ctx.moveTo(x, box.top);
      ctx.lineTo(x, box.top + box.height);
      ctx.stroke();
      ctx.fillText(line.label, x + 3 * dpr, box.top + (line.dash ? box.height - 4 * dpr : 11 * dpr));
    });
    ctx.setLineDash([]);
    spec.marks.forEach(function (mark) {
      var y = u.data[mark.series][mark.at];
      if (y == null) return;
      var cx = u.valToPos(u.data[0][mark.at], "x", true), cy = u.valToPos(y, "y", true);
      var r = 5 * dpr;
      ctx.fillStyle = mark.color;
      ctx.strokeStyle = mark.color;
      ctx.beginPath();
      if (mark.shape === "down") { ctx.moveTo(cx - r, cy - r); ctx.lineTo(cx + r, cy - r); ctx.lineTo(cx, cy + r); }
      else if (mark.shape === "up") { ctx.moveTo(cx - r, cy + r); ctx.lineTo(cx + r, cy + r); ctx.lineTo(cx, cy - r); }
      else if (mark.shape === "ring") { ctx.arc(cx, cy, r * 0.8, 0, 2 * Math.PI); ctx.lineWidth = dpr; ctx.stroke(); return; }
      else { ctx.moveTo(cx, cy - r); ctx.lineTo(cx + r, cy); ctx.lineTo(cx, cy + r); ctx.lineTo(cx - r, cy); }
      ctx.closePath();
      ctx.fill();
    });
    ctx.restore();
  }

  function verdictMarks(group, metric, keep, series) {
    var statuses = group.verdicts[metric], marks = [];
    if (!statuses) return marks;
    keep.forEach(function (p, k) {
      var s = STATUS[statuses[p]];
      if (!s || s === "pass") return;
      var color = s === "regression" || s === "error" ? COLORS.regression : s === "improvement" ? COLORS.improvement : COLORS.other;
      marks.push({ at: k, series: series, color: color, shape: s === "regression" ? "down" : s === "improvement" ? "up" : "diamond" });
    });
    return marks;
  }

  function positionsMap(keep) {
    var index = {};
    keep.forEach(function (p, k) { index[p] = k; });
    return index;
  }
  function changeLines(group, key, keep, color) {
    var index = positionsMap(keep);
    return (group.changes[key] || []).filter(function (c) { return c[0] in index; }).map(function (c) {
      var rel = c[1] ? c[2] / c[1] - 1 : 0;
      return { at: index[c[0]], color: color, label: pct(rel), dash: false };
    });
  }
  function fingerprintLines(group, keep) {
    var index = positionsMap(keep);
    return group.fingerprints.filter(function (f) { return f[0] in index; }).map(function (f) {
      return { at: index[f[0]], color: COLORS.fingerprint, label: "env", dash: true };
    });
  }

  /* The chart specs of one group: series, bands and marks, for the runs kept. */
  function chartSpecs(group, keep) {
    var specs = [], s = group.series, fp = fingerprintLines(group, keep);
    function line(key, label, color, extra) {
      return Object.assign({ key: key, label: label, stroke: color, values: pick(s[key], keep) }, extra || {});
    }
    function banded(metric, lines) {
      var steps = group.bands[metric];
      if (!steps) return { lines: lines, bands: null };
      var band = expandBand(steps, group.runs.length);
      return { lines: lines, bands: [pick(band[0], keep), pick(band[1], keep)] };
    }
    if (s["spec.output_tok_s"] || s["plain.output_tok_s"]) {
      var tok = banded("output_tok_s", [
        line("spec.output_tok_s", "spec tok/s", COLORS.spec),
        line("plain.output_tok_s", "plain tok/s", COLORS.plain),
      ]);
      var reused = [];
      keep.forEach(function (p, k) { if (runs.reused[group.runs[p]] != null) reused.push({ at: k, series: 2, color: COLORS.plain, shape: "ring" }); });
      specs.push({
        id: "tok", title: "output tok/s: speculative and plain", unit: "tok/s", wide: true, series: tok.lines, band: tok.bands,
        marks: verdictMarks(group, "output_tok_s", keep, 1).concat(reused),
        lines: changeLines(group, "spec.output_tok_s", keep, COLORS.spec).concat(changeLines(group, "plain.output_tok_s", keep, COLORS.plain), fp),
      });
    }
    [["spec.speedup", "speedup", "speedup (spec ÷ plain tok/s)", COLORS.speedup],
     ["spec.accept_length", "accept_length", "accept length (tokens per verify)", COLORS.accept]].forEach(function (d) {
      if (!s[d[0]]) return;
      var b = banded(d[1], [line(d[0], d[1], d[3])]);
      specs.push({ id: d[1], title: d[2], unit: UNITS[d[1]], series: b.lines, band: b.bands,
        marks: verdictMarks(group, d[1], keep, 1), lines: changeLines(group, d[0], keep, d[3]).concat(fp) });
    });
    if (group.phases.cycle) specs.push(phaseSpec(group, keep, fp));
    Object.keys(s).filter(function (k) { return MAIN.indexOf(k) < 0; }).forEach(function (key) {
      var mode = key.split(".")[0], metric = key.slice(mode.length + 1);
      var b = mode === "spec" ? banded(metric, [line(key, key, mode === "spec" ? COLORS.spec : COLORS.plain)]) : { lines: [line(key, key, COLORS.plain)], bands: null };
      specs.push({ id: key, title: key, unit: UNITS[metric] || "", small: true, series: b.lines, band: b.bands,
        marks: mode === "spec" ? verdictMarks(group, metric, keep, 1) : [], lines: changeLines(group, key, keep, b.lines[0].stroke).concat(fp) });
    });
    return specs;
  }

  function phaseSpec(group, keep, fp) {
    var ph = group.phases, raw = [], cycle = pick(ph.cycle, keep);
    PHASES.forEach(function (p) {
      var values = p[0] === "other" ? cycle.map(function (c, k) {
        if (c == null) return null;
        var named = 0;
        ["draft", "verify", "draft_extend", "accept"].forEach(function (n) { named += (ph[n] && ph[n][keep[k]]) || 0; });
        return Math.max(c - named, 0);
      }) : pick(ph[p[0]], keep);
      if (state.phases === "share") values = values.map(function (v, k) { return v == null || !cycle[k] ? null : v / cycle[k] * 100; });
      raw.push(values);
    });
    return { id: "phases", title: state.phases === "share" ? "where the cycle goes: % of each cycle, per phase (speculative server)" : "where the cycle goes: ms per cycle, per phase (speculative server)",
      unit: state.phases === "share" ? "% of cycle" : "ms", wide: true, stacked: raw, marks: [], lines: fp, band: null,
      series: PHASES.map(function (p, i) { return { key: "phase." + p[0], label: p[0], stroke: p[1], values: raw[i] }; }) };
  }

  /* uPlot options and data for one spec. */
  function plotFor(spec, group, keep, width) {
    var xs = state.x === "time" ? keep.map(function (p) { return runs.t0 + runs.t[group.runs[p]]; }) : keep.map(function (_, k) { return k; });
    var series = [{ label: state.x === "time" ? "time" : "run", value: function (u, v, si, i) {
      return i == null ? "–" : "#" + runs.id[group.runs[keep[i]]] + " " + when(group.runs[keep[i]]);
    } }];
    var columns = [xs], bands = [];
    var stack = spec.stacked ? stackColumns(spec.stacked) : null;
    spec.series.forEach(function (line, i) {
      columns.push(stack ? stack[i] : line.values);
      series.push({
        label: line.label, stroke: line.stroke, width: stack ? 1 : 1.5, spanGaps: false,
        fill: stack && i === 0 ? line.stroke : undefined,
        points: { show: keep.length <= 60, size: 5 },
        value: function (u, v, si, idx) { return idx == null ? "–" : fmt(spec.series[si - 1].values[idx]); },
      });
      if (stack && i > 0) bands.push({ series: [i + 1, i], fill: line.stroke });
    });
    if (spec.band) {
      columns.push(spec.band[1], spec.band[0]);
      var hi = columns.length - 2, lo = columns.length - 1;
      series.push({ label: "band high", stroke: COLORS.bandLine, width: 1, dash: [4, 4], points: { show: false }, value: function (u, v) { return fmt(v); } });
      series.push({ label: "band low", stroke: COLORS.bandLine, width: 1, dash: [4, 4], points: { show: false }, value: function (u, v) { return fmt(v); } });
      bands.push({ series: [hi, lo], fill: COLORS.band });
    }
    var opts = {
      title: spec.title, width: width, height: spec.small ? 150 : 230, series: series, bands: bands,
      scales: { x: { time: state.x === "time" } },
      axes: [{ space: 60, values: state.x === "time" ? undefined : function (u, splits) {
        return splits.map(function (v) { return Number.isInteger(v) && v >= 0 && v < keep.length ? "#" + runs.id[group.runs[keep[v]]] : ""; });
      } }, { label: spec.unit, size: 60, values: function (u, splits) { return splits.map(fmt); } }],
      cursor: { sync: { key: "group-" + group.index }, drag: { x: true, y: false } },
      legend: { live: true },
      hooks: {
        draw: [function (u) { drawMarks(u, spec); }],
        setCursor: [function (u) { showRun(group, keep, u.cursor.idx); }],
        setScale: [function (u, key) { if (key === "x") syncScale(group, u); }],
      },
    };
    return { opts: opts, columns: columns };
  }

  function stackColumns(raw) {
    var total = raw[0].map(function () { return 0; }), out = [];
    raw.forEach(function (values) {
      total = total.map(function (t, k) { return values[k] == null ? t : t + values[k]; });
      out.push(total.map(function (t, k) { return raw[0][k] == null && values[k] == null ? null : t; }));
    });
    return out;
  }

  function syncScale(group, source) {
    // Only a zoom by the user spreads; charts being built set their own scales.
    if (syncing || !report.ready) return;
    syncing = true;
    var min = source.scales.x.min, max = source.scales.x.max;
    live.forEach(function (c) { if (c.group === group && c.plot !== source) c.plot.setScale("x", { min: min, max: max }); });
    syncing = false;
  }

  /* The hovered run, in words and links, under the group's charts. */
  function showRun(group, keep, idx) {
    var panel = document.getElementById("run-" + group.index);
    if (!panel || idx == null || idx < 0 || idx >= keep.length) return;
    var p = keep[idx], i = group.runs[p];
    panel.replaceChildren();
    panel.append(make("strong", null, "run #" + runs.id[i]), " · " + when(i) + " · ");
    if (runs.commit[i]) panel.append("commit ", link(commitHref(i), runs.commit[i]), runs.dirty[i] ? " (dirty)" : "", " · ");
    panel.append("branch ", make("code", null, data.branches[runs.branch[i]] || "–"));
    if (runs.pr[i]) panel.append(" · ", link(prHref(i), "PR #" + runs.pr[i]));
    if (runs.ci[i]) panel.append(" · ", link(ciHref(i), "CI run"));
    panel.append(" · status ", make("span", "status " + STATUS[runs.status[i]], STATUS[runs.status[i]]));
    if (runs.seconds && runs.seconds[i] != null) panel.append(" · runner time " + runs.seconds[i] + " s");
    if (!runs.equivalent[i]) panel.append(" · ", make("span", "status regression", "outputs differ"));
    if (runs.reused[i] != null) panel.append(" · plain figures reused from run #" + runs.reused[i]);
    group.fingerprints.forEach(function (f) {
      if (f[0] === p) panel.append(make("div", "fingerprint-change", "environment changed here: " + f[1]));
    });
  }

  function visible(group) {
    return (!state.scenario || group.scenario === state.scenario) && (!state.profile || group.profile === state.profile);
  }

  /* The first screen's charts are made at once (the page is "ready"), the rest right after
   * it is painted, in one go: the first screen does not wait for them, and a print or a
   * full-page screenshot needs no scrolling (report.complete: every chart is drawn).
   * Printing before then makes them at once. Slicing the rest to keep the page answering
   * took three times as long in all (benchmarks/report_scale.py). */
  var jobs = [];
  var frame = null, pending = null;  // the frame, then the timer, that make the rest

  function queueChart(holder, group, build) {
    holder.perfgateJob = { group: group, build: build };
    jobs.push(holder);
  }
  function makeChart(holder) {
    var job = holder.perfgateJob;
    if (!job) return;
    holder.perfgateJob = null;
    var built = job.build(Math.max(holder.clientWidth, 280));
    built.opts.hooks = built.opts.hooks || {};
    built.opts.hooks.draw = (built.opts.hooks.draw || []).concat([function (u) { chartDrawn(u.root.parentNode); }]);
    report.made++;
    live.push({ group: job.group, plot: new uPlot(built.opts, built.columns, holder), el: holder });
  }
  function chartDrawn(holder) {
    if (holder.getAttribute("data-drawn") !== String(report.build)) {
      holder.setAttribute("data-drawn", String(report.build));
      report.drawn++;
    }
    settle();
  }
  function settle() {
    var timings = report.timings, now = performance.now();
    report.ready = report.drawn === report.made;
    report.complete = report.drawn === report.total;
    if (report.ready && timings.readyMs == null) timings.readyMs = now;
    if (report.complete && timings.completeMs == null) timings.completeMs = now;
  }
  function makeRestLater() {
    // A frame callback runs just before the first screen is painted; its timer, after.
    frame = requestAnimationFrame(function () { frame = null; pending = setTimeout(report.drawAll, 0); });
  }
  function cancelRest() {
    cancelAnimationFrame(frame);
    clearTimeout(pending);
    frame = pending = null;
  }
  report.drawAll = function () {
    cancelRest();
    jobs.forEach(makeChart);
    jobs.length = 0;
  };
  window.addEventListener("beforeprint", report.drawAll);
  // Emulated print media (headless browsers) comes without a beforeprint.
  window.matchMedia("print").addEventListener("change", function (e) { if (e.matches) report.drawAll(); });

  function near(holder) {
    var box = holder.getBoundingClientRect();
    return box.bottom >= -600 && box.top <= window.innerHeight + 600;
  }

  function draw() {
    var start = performance.now();
    report.timings = { scriptAt: began, parseMs: parsedMs, buildMs: null, readyMs: null, completeMs: null };
    report.ready = report.complete = false;
    report.build++;
    report.made = report.drawn = 0;
    live.forEach(function (c) { c.plot.destroy(); });
    cancelRest();
    live.length = jobs.length = 0;
    data.groups.forEach(function (group, gi) {
      group.index = gi;
      var section = document.getElementById("group-" + gi);
      section.hidden = !visible(group);
      var box = document.getElementById("charts-" + gi);
      box.replaceChildren();
      if (section.hidden) return;
      var keep = selection(group);
      text(document.getElementById("kept-" + gi), keep.length + " of " + group.runs.length + " runs shown");
      if (!keep.length) return;
      chartSpecs(group, keep).forEach(function (spec) {
        var holder = make("div", spec.small ? "chart small" : spec.wide ? "chart wide" : "chart");
        holder.setAttribute("data-chart", spec.id);
        holder.style.minHeight = (spec.small ? 150 : 230) + 70 + "px";  // its size before it is drawn
        box.append(holder);
        queueChart(holder, group, function (width) { return plotFor(spec, group, keep, width); });
      });
      showRun(group, keep, keep.length - 1);
    });
    queueSweeps();
    report.total = jobs.length;
    jobs.filter(near).forEach(makeChart);
    if (jobs.length > report.made) makeRestLater();
    report.timings.buildMs = performance.now() - start;
    settle();
  }

  function queueSweeps() {
    (data.sweeps || []).forEach(function (sweep, si) {
      var holder = document.getElementById("sweep-chart-" + si);
      if (!holder) return;
      holder.replaceChildren();
      holder.setAttribute("data-chart", "sweep-" + si);
      queueChart(holder, null, function (width) { return sweepPlot(sweep, width); });
    });
  }

  function sweepPlot(sweep, width) {
    var xs = sweep.steps.map(function (_, k) { return k; });
    var labels = sweep.steps.map(function (s, k) { return "steps " + s + " / topk " + sweep.topk[k] + " / draft tokens " + sweep.draftTokens[k]; });
    function short(v) { return Number.isInteger(v) && sweep.steps[v] != null ? "s" + sweep.steps[v] + "/k" + sweep.topk[v] + "/d" + sweep.draftTokens[v] : ""; }
    var opts = {
      title: "tok/s and accept length by setting", width: width, height: 230,
      scales: { x: { time: false, range: [-0.3, xs.length - 0.7] }, acc: {} },
      series: [
        { label: "setting", value: function (u, v, s, i) { return i == null ? "–" : labels[i] + " (run #" + sweep.run[i] + ")"; } },
        { label: "spec tok/s", stroke: COLORS.spec, width: 2, points: { show: true, size: 8 }, value: function (u, v) { return fmt(v); } },
        { label: "plain tok/s", stroke: COLORS.plain, width: 1.5, dash: [5, 4], points: { show: true, size: 6 }, value: function (u, v) { return fmt(v); } },
        { label: "accept length", stroke: COLORS.accept, width: 1.5, scale: "acc", points: { show: true, size: 7 }, value: function (u, v) { return fmt(v); } },
      ],
      axes: [
        { values: function (u, splits) { return splits.map(short); } },
        { label: "tok/s", size: 60, values: function (u, splits) { return splits.map(fmt); } },
        { side: 1, scale: "acc", label: "accept length", size: 60, grid: { show: false }, values: function (u, splits) { return splits.map(fmt); } },
      ],
    };
    return { opts: opts, columns: [xs, sweep.spec, sweep.plain, sweep.accept] };
  }

  function bindFilters() {
    ["scenario", "profile", "branch", "x", "phases"].forEach(function (name) {
      var input = document.getElementById("filter-" + name);
      if (input) input.addEventListener("change", function () { state[name] = input.value; draw(); });
    });
    var timer = null;
    window.addEventListener("resize", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        live.forEach(function (c) { c.plot.setSize({ width: Math.max(c.el.clientWidth, 280), height: c.plot.height }); });
      }, 150);
    });
  }

  bindFilters();
  draw();
})();
