// The Strandline console: fetches /api/cluster every second and redraws the tables; fetches
// /api/charts every two seconds and redraws the charts (uPlot); reads records on demand.
// Every value goes in through textContent, never as HTML.
"use strict";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"];
const MARK_COLORS = {leader: "#6f42c1", isr_shrink: "#d62728", isr_expand: "#2ca02c", offline: "#000000",
                     unclean: "#ff7f0e"};
const INTERNAL = new Set(["__consumer_offsets", "__transaction_state"]);
const PROBLEMS = ["offline", "under_min_isr", "under_replicated", "leader_not_answering"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(value) {
  return value === null || value === undefined ? "–" : value;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function rate(bytes) {
  if (bytes === null || bytes === undefined) return "–";
  if (bytes >= 1 << 20) return (bytes / (1 << 20)).toFixed(1) + " MiB";
  if (bytes >= 1024) return (bytes / 1024).toFixed(1) + " KiB";
  return Math.round(bytes) + " B";
}

function problemClasses(p) {
  return PROBLEMS.filter((k) => p[k]).map((k) => k.replaceAll("_", "-")).join(" ");
}

function showInternal() {
  return document.getElementById("show-internal").checked;
}

function drawSummary(view) {
  const s = view.summary;
  const userPartitions = s.partitions - s.internal_partitions;
  let partitions = `${s.topics - s.internal_topics} topics, ${userPartitions} partitions`;
  if (s.internal_partitions) {
    partitions += showInternal()
      ? ` + ${s.internal_topics} internal topics, ${s.internal_partitions} partitions`
      : ` (+ ${s.internal_partitions} partitions of ${s.internal_topics} internal topics, folded)`;
  }
  const parts = [
    `${s.registered}/${s.brokers} brokers registered`,
    `controller ${show(view.controller)}`,
    partitions,
    `${s.under_replicated} under-replicated`,
    `${s.under_min_isr} under min ISR`,
    `${s.offline} offline`,
  ];
  if (s.leader_not_answering) parts.push(`${s.leader_not_answering} led by a broker not answering`);
  const summary = document.getElementById("summary");
  summary.textContent = parts.join(" · ");
  summary.dataset.underReplicated = s.under_replicated;
  summary.dataset.offline = s.offline;
  summary.dataset.underMinIsr = s.under_min_isr;
  summary.dataset.userPartitions = userPartitions;
  summary.dataset.internalPartitions = s.internal_partitions;
}

function drawBrokers(view) {
  fill(document.querySelector("#brokers tbody"), view.brokers.map((b) => {
    const state = b.registered ? (b.reachable ? "up" : "registered, not answering") : (b.reachable ? "not registered" : "down");
    return el("tr", {"data-broker": b.id},
      el("td", {}, b.id),
      el("td", {}, show(b.address)),
      el("td", {class: b.registered && b.reachable ? null : "down"}, state),
      el("td", {class: b.controller ? "controller" : null}, b.controller ? "controller" : ""),
      el("td", {}, b.metrics ? el("a", {href: b.metrics + "/metrics"}, "metrics") : "–"));
  }));
}

function lastRate(topic, series) {
  const values = charts && charts.topics.topics[topic] ? charts.topics.topics[topic][series] : null;
  return values && values.length ? values[values.length - 1] : null;
}

function drawTopics(view) {
  fill(document.querySelector("#topics tbody"), view.topics.map((t) =>
    el("tr", {"data-topic": t.topic, class: t.internal ? "internal" : null},
      el("td", {}, t.topic + (t.internal ? " (internal)" : "")),
      el("td", {class: "num"}, t.partitions),
      el("td", {class: "num"}, rate(lastRate(t.topic, "in"))),
      el("td", {class: "num"}, rate(lastRate(t.topic, "out"))),
      el("td", {class: "num"}, t.under_replicated),
      el("td", {class: "num"}, t.under_min_isr),
      el("td", {class: "num"}, t.offline))));
}

function partitionRow(p) {
  const replicas = p.replica_states.map((r) =>
    el("span", {class: ["replica", r.role, r.in_isr ? null : "out-of-isr", r.answering ? null : "silent"]
                         .filter(Boolean).join(" "), "data-replica": r.broker},
       `${r.broker}: ${r.role}${r.answering ? "" : " (not answering)"} · ${show(r.log_end_offset)} · ` +
       `${show(r.high_watermark)} · ${show(r.lag)} · ${r.in_isr ? "in" : "out"}`));
  return el("tr", {class: problemClasses(p) || null, "data-partition": `${p.topic}-${p.partition}`},
    el("td", {}, el("a", {href: "#charts-section", "data-chart": `${p.topic}/${p.partition}`}, `${p.topic}-${p.partition}`)),
    el("td", {}, p.leader < 0 ? "none" : p.leader_not_answering ? `${p.leader} (not answering)` : p.leader),
    el("td", {class: "num"}, show(p.leader_epoch)),
    el("td", {}, `[${p.isr.join(", ")}]` + (p.min_insync_replicas ? ` (min ${p.min_insync_replicas})` : "")),
    el("td", {class: "num"}, show(p.high_watermark)),
    el("td", {}, ...replicas));
}

function foldedRow(t) {
  const problems = PROBLEMS.filter((k) => t[k]).map((k) => `${t[k]} ${k.replaceAll("_", " ")}`);
  return el("tr", {class: ["folded", ...PROBLEMS.filter((k) => t[k]).map((k) => k.replaceAll("_", "-"))].join(" "),
                   "data-folded": t.topic, "data-count": t.partitions},
    el("td", {colspan: 6},
       `${t.topic}: ${t.partitions} partitions, folded (${problems.length ? problems.join(", ") : "all healthy"}; ` +
       "“show internal topics” lists them)"));
}

function drawPartitions(view) {
  const onlyProblems = document.getElementById("only-problems").checked;
  const internal = showInternal();
  const rows = [];
  let shown = 0;
  for (const p of view.partitions) {
    if (p.internal && !internal) continue;
    if (onlyProblems && !PROBLEMS.some((k) => p[k])) continue;
    rows.push(partitionRow(p));
    shown += 1;
  }
  if (!internal) {
    for (const t of view.topics.filter((t) => t.internal)) {
      if (!onlyProblems || PROBLEMS.some((k) => t[k])) rows.push(foldedRow(t));
    }
  }
  fill(document.querySelector("#partitions tbody"), rows);
  const total = internal ? view.summary.partitions : view.summary.partitions - view.summary.internal_partitions;
  const note = document.getElementById("partitions-shown");
  note.textContent = onlyProblems ? `${shown} of ${total} partitions shown (those with a problem)`
                                  : `${shown} partitions shown`;
  note.dataset.shown = shown;
}

function memberName(m) {
  return `${m.client_id}@${m.host}`;
}

function drawGroups(view) {
  const rows = [];
  for (const g of view.groups) {
    const owner = new Map();
    for (const m of g.member_list || []) {
      for (const [topic, partition] of m.assignment) owner.set(`${topic}-${partition}`, memberName(m));
    }
    const members = g.member_list ? g.member_list.map(memberName).join(", ") : String(g.members);
    rows.push(el("tr", {class: "group", "data-group": g.group},
      el("td", {}, g.group), el("td", {}, g.state),
      el("td", {}, `${g.members}${g.member_list && g.member_list.length ? ": " + members : ""}`),
      el("td", {class: "num"}, g.coordinator),
      el("td", {colspan: 4}, `${g.offsets.length} partitions committed`),
      el("td", {class: "num"}, g.lag)));
    for (const o of g.offsets) {
      const name = `${o.topic}-${o.partition}`;
      rows.push(el("tr", {"data-group": g.group, "data-group-partition": name},
        el("td", {colspan: 4}, ""),
        el("td", {}, name),
        el("td", {}, show(owner.get(name))),
        el("td", {class: "num"}, o.offset),
        el("td", {class: "num"}, show(o.end_offset)),
        el("td", {class: "num"}, show(o.lag))));
    }
  }
  fill(document.querySelector("#groups tbody"), rows);
}

function drawEvents(view) {
  // events about the internal topics' partitions are folded with them
  const internal = showInternal();
  const shown = view.events.filter((e) => internal || !INTERNAL.has(e.topic));
  const items = shown.slice().reverse().map((e) =>
    el("li", {class: e.level, "data-kind": e.kind},
       `${new Date(e.time_ms).toISOString().slice(0, 23).replace("T", " ")} broker ${e.broker} ${e.kind}: ${e.message}`));
  document.getElementById("events").replaceChildren(...items);
  const hidden = view.events.length - shown.length;
  const note = document.getElementById("events-hidden");
  note.textContent = hidden ? `(${hidden} events about internal topics folded; “show internal topics” lists them)` : "";
  note.dataset.hidden = hidden;
}

function drawLab(view) {
  const section = document.getElementById("lab");
  section.hidden = view.lab_runs.length === 0;
  document.getElementById("lab-runs").replaceChildren(...view.lab_runs.map((r) =>
    el("li", {}, r.timeline ? el("a", {href: r.timeline}, r.run) : r.run,
       ` ${show(r.scenario)}: ${show(r.summary)}${r.error ? " (error: " + r.error + ")" : ""}`)));
}

function syncSelect(select, values, preferred) {
  const current = select.value;
  const have = [...select.options].map((o) => o.value);
  if (have.length !== values.length || have.some((v, i) => v !== values[i])) {
    select.replaceChildren(...values.map((v) => el("option", {value: v}, v.replace("/", "-"))));
  }
  select.value = values.includes(current) ? current : (preferred !== undefined ? preferred : values[0] || "");
}

function drawPickers(view) {
  const internal = showInternal();
  const partitions = view.partitions.filter((p) => internal || !p.internal).map((p) => `${p.topic}/${p.partition}`);
  syncSelect(document.getElementById("chart-partition"), partitions);
  const topics = view.topics.map((t) => t.topic);
  const topicSelect = document.getElementById("records-topic");
  const before = topicSelect.value;
  const have = [...topicSelect.options].map((o) => o.value);
  if (have.length !== topics.length || have.some((v, i) => v !== topics[i])) {
    topicSelect.replaceChildren(...topics.map((t) => el("option", {value: t}, t)));
    topicSelect.value = topics.includes(before) ? before : topics[0] || "";
  }
}

let last = null;

function draw(view) {
  last = view;
  drawSummary(view);
  drawBrokers(view);
  drawTopics(view);
  drawPartitions(view);
  drawGroups(view);
  drawEvents(view);
  drawLab(view);
  drawPickers(view);
  document.body.dataset.polls = view.polls;
}

async function refresh() {
  try {
    const resp = await fetch("/api/cluster", {cache: "no-store"});
    if (resp.ok) draw(await resp.json());
  } catch (err) {
    document.getElementById("summary").textContent = "console not answering: " + err;
  }
}

// ---------------------------------------------------------------------------- charts (uPlot)

let charts = null;
const plots = {};

function chartWidth(id) {
  return Math.max(320, document.getElementById(id).clientWidth || 480);
}

function plot(id, seriesNames, data, marks) {
  const key = seriesNames.join("\u0000");
  const existing = plots[id];
  if (existing && existing.key === key) {
    existing.marks = marks || [];
    existing.chart.setData(data);
    return;
  }
  if (existing) existing.chart.destroy();
  const holder = {key, marks: marks || []};
  const series = [{}].concat(seriesNames.map((name, i) => ({
    label: name, stroke: PALETTE[i % PALETTE.length], width: name === "HW" ? 2.5 : 1.5,
    dash: name === "HW" ? [6, 3] : undefined, spanGaps: false,
    value: (u, v) => v === null || v === undefined ? "–" : (id === "chart-partition-plot" ? v : rate(v) + "/s"),
  })));
  const opts = {
    width: chartWidth(id), height: 220, series,
    scales: {x: {time: true}},
    axes: [{}, {size: 70, values: (u, ticks) => ticks.map((v) => id === "chart-partition-plot" ? v : rate(v))}],
    hooks: {draw: [(u) => drawMarks(u, holder.marks)]},
  };
  holder.chart = new uPlot(opts, data, document.getElementById(id));
  plots[id] = holder;
}

function drawMarks(u, marks) {
  const ctx = u.ctx;
  const top = u.bbox.top;
  const bottom = u.bbox.top + u.bbox.height;
  ctx.save();
  ctx.font = `${Math.round(10 * devicePixelRatio)}px sans-serif`;
  for (const m of marks) {
    const x = u.valToPos(m.time, "x", true);
    if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
    ctx.strokeStyle = ctx.fillStyle = MARK_COLORS[m.kind] || "#333";
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.lineWidth = devicePixelRatio;
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, bottom);
    ctx.stroke();
    ctx.fillText(m.kind.replace("isr_", "ISR "), x + 3 * devicePixelRatio, top + 12 * devicePixelRatio);
  }
  ctx.restore();
}

function drawCharts(data) {
  charts = data;
  const names = Object.keys(data.topics.topics).filter((t) => showInternal() || !INTERNAL.has(t));
  for (const [id, series] of [["chart-in", "in"], ["chart-out", "out"]]) {
    plot(id, names, [data.topics.times, ...names.map((n) => data.topics.topics[n][series])]);
    document.getElementById(id).dataset.points = data.topics.times.length;
  }
  const p = data.partition;
  const holder = document.getElementById("chart-partition-plot");
  if (p && p.times.length) {
    const brokers = Object.keys(p.log_end_offsets);
    plot("chart-partition-plot", [...brokers.map((b) => `LEO of replica ${b}`), "HW"],
         [p.times, ...brokers.map((b) => p.log_end_offsets[b]), p.high_watermark], p.marks);
    holder.dataset.partition = `${p.topic}-${p.partition}`;
    holder.dataset.points = p.times.length;
    holder.dataset.marks = p.marks.map((m) => m.kind).join(" ");
    holder.dataset.lastHw = show(p.high_watermark[p.high_watermark.length - 1]);
  }
  if (last) drawTopics(last);
}

async function refreshCharts() {
  const chosen = document.getElementById("chart-partition").value;
  let query = "";
  if (chosen) {
    const cut = chosen.lastIndexOf("/");
    query = `?topic=${encodeURIComponent(chosen.slice(0, cut))}&partition=${chosen.slice(cut + 1)}`;
  }
  try {
    const resp = await fetch("/api/charts" + query, {cache: "no-store"});
    if (resp.ok) drawCharts(await resp.json());
  } catch (err) {
    // the summary line says the console is not answering
  }
}

// ---------------------------------------------------------------------------- the record browser

function toHex(shown) {
  if (shown.hex !== undefined) return shown.hex;
  return [...new TextEncoder().encode(shown.text)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function bytesCell(shown, format) {
  if (shown === null || shown === undefined) return el("td", {class: "null"}, "null");
  const hex = format === "hex" || shown.hex !== undefined;
  const text = hex ? toHex(shown) : shown.text;
  return el("td", {class: hex ? "hex" : "text", title: `${shown.size} bytes${shown.truncated ? ", cut" : ""}`},
            text + (shown.truncated ? " …" : ""));
}

function headersCell(headers, format) {
  return el("td", {}, ...headers.map((h) => {
    const value = h.value === null ? "null" : (format === "hex" || h.value.hex !== undefined ? toHex(h.value) : h.value.text);
    return el("div", {class: "header"}, `${h.key}=${value}`);
  }));
}

async function readRecords(event) {
  event.preventDefault();
  const params = new URLSearchParams();
  params.set("topic", document.getElementById("records-topic").value);
  params.set("partition", document.getElementById("records-partition").value || "0");
  params.set("limit", document.getElementById("records-limit").value || "50");
  const from = document.getElementById("records-from").value;
  if (from === "offset") params.set("offset", document.getElementById("records-offset").value || "0");
  if (from === "latest") params.set("offset", String(-Number(document.getElementById("records-limit").value || 50)));
  if (from === "time") {
    const when = document.getElementById("records-time").value;
    params.set("time", String(when ? new Date(when).getTime() : Date.now()));
  }
  if (document.getElementById("records-committed").checked) params.set("isolation", "read_committed");
  const format = document.getElementById("records-format").value;
  const status = document.getElementById("records-status");
  status.textContent = "reading…";
  status.dataset.state = "reading";
  let body;
  try {
    const resp = await fetch("/api/records?" + params, {cache: "no-store"});
    body = await resp.json();
  } catch (err) {
    body = {error: String(err)};
  }
  if (body.error) {
    status.textContent = "error: " + body.error;
    status.dataset.state = "error";
    fill(document.querySelector("#records tbody"), []);
    return;
  }
  status.textContent = `${body.records.length} records of ${body.topic}-${body.partition} from offset ${body.start} ` +
    `(log start ${body.low_watermark}, high watermark ${body.high_watermark}` +
    `${body.read_committed ? ", read_committed" : ""})${body.limited ? ", limited: more follow" : ""}` +
    `${body.end ? ", end of the partition" : ""}`;
  status.dataset.state = "done";
  fill(document.querySelector("#records tbody"), body.records.map((r) =>
    el("tr", {"data-offset": r.offset},
      el("td", {class: "num"}, r.offset),
      el("td", {title: r.timestamp_type}, r.timestamp_ms >= 0 ? new Date(r.timestamp_ms).toISOString() : "–"),
      bytesCell(r.key, format), bytesCell(r.value, format), headersCell(r.headers, format))));
}

function fromChanged() {
  const from = document.getElementById("records-from").value;
  document.getElementById("records-offset-label").hidden = from !== "offset";
  document.getElementById("records-time-label").hidden = from !== "time";
}

// ---------------------------------------------------------------------------- wiring

for (const id of ["only-problems", "show-internal"]) {
  document.getElementById(id).addEventListener("change", () => {
    if (last) draw(last);
    if (charts) drawCharts(charts);
  });
}
document.getElementById("chart-partition").addEventListener("change", refreshCharts);
document.getElementById("partitions").addEventListener("click", (event) => {
  const link = event.target.closest("a[data-chart]");
  if (!link) return;
  const select = document.getElementById("chart-partition");
  select.value = link.dataset.chart;
  refreshCharts();
});
document.getElementById("records-form").addEventListener("submit", readRecords);
document.getElementById("records-from").addEventListener("change", fromChanged);
fromChanged();
refresh().then(refreshCharts);
setInterval(refresh, 1000);
setInterval(refreshCharts, 2000);
