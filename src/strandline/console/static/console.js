// The Strandline console: fetches /api/cluster every second and redraws the tables.
// Every value goes in through textContent, never as HTML.
"use strict";

const INTERNAL = new Set(["__consumer_offsets", "__transaction_state"]);

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

function drawSummary(view) {
  const s = view.summary;
  const parts = [
    `${s.registered}/${s.brokers} brokers registered`,
    `controller ${show(view.controller)}`,
    `${s.topics} topics, ${s.partitions} partitions`,
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

function drawPartitions(view) {
  const onlyProblems = document.getElementById("only-problems").checked;
  const internal = document.getElementById("show-internal").checked;
  const rows = [];
  for (const p of view.partitions) {
    const problem = p.offline || p.under_replicated || p.under_min_isr || p.leader_not_answering;
    if (onlyProblems && !problem) continue;
    if (!internal && INTERNAL.has(p.topic) && !problem) continue;
    const classes = [p.offline ? "offline" : null, p.under_min_isr ? "under-min-isr" : null,
                     p.under_replicated ? "under-replicated" : null,
                     p.leader_not_answering ? "leader-not-answering" : null].filter(Boolean).join(" ");
    const replicas = p.replica_states.map((r) =>
      el("span", {class: ["replica", r.role, r.in_isr ? null : "out-of-isr", r.answering ? null : "silent"]
                           .filter(Boolean).join(" "), "data-replica": r.broker},
         `${r.broker}: ${r.role}${r.answering ? "" : " (not answering)"} · ${show(r.log_end_offset)} · ` +
         `${show(r.high_watermark)} · ${show(r.lag)} · ${r.in_isr ? "in" : "out"}`));
    rows.push(el("tr", {class: classes || null, "data-partition": `${p.topic}-${p.partition}`},
      el("td", {}, `${p.topic}-${p.partition}`),
      el("td", {}, p.leader < 0 ? "none" : p.leader_not_answering ? `${p.leader} (not answering)` : p.leader),
      el("td", {class: "num"}, show(p.leader_epoch)),
      el("td", {}, `[${p.isr.join(", ")}]` + (p.min_insync_replicas ? ` (min ${p.min_insync_replicas})` : "")),
      el("td", {class: "num"}, show(p.high_watermark)),
      el("td", {}, ...replicas)));
  }
  fill(document.querySelector("#partitions tbody"), rows);
}

function drawGroups(view) {
  const rows = [];
  for (const g of view.groups) {
    const offsets = g.offsets.length ? g.offsets : [null];
    for (const o of offsets) {
      rows.push(el("tr", {"data-group": g.group},
        el("td", {}, g.group), el("td", {}, g.state), el("td", {class: "num"}, g.members),
        el("td", {class: "num"}, g.coordinator),
        el("td", {}, o ? `${o.topic}-${o.partition}` : "–"),
        el("td", {class: "num"}, o ? o.offset : "–"),
        el("td", {class: "num"}, o ? show(o.end_offset) : "–"),
        el("td", {class: "num"}, o ? show(o.lag) : "–")));
    }
  }
  fill(document.querySelector("#groups tbody"), rows);
}

function drawEvents(view) {
  const items = view.events.slice().reverse().map((e) =>
    el("li", {class: e.level, "data-kind": e.kind},
       `${new Date(e.time_ms).toISOString().slice(11, 23)} broker ${e.broker} ${e.kind}: ${e.message}`));
  document.getElementById("events").replaceChildren(...items);
}

function drawLab(view) {
  const section = document.getElementById("lab");
  section.hidden = view.lab_runs.length === 0;
  document.getElementById("lab-runs").replaceChildren(...view.lab_runs.map((r) =>
    el("li", {}, r.timeline ? el("a", {href: r.timeline}, r.run) : r.run,
       ` ${show(r.scenario)}: ${show(r.summary)}${r.error ? " (error: " + r.error + ")" : ""}`)));
}

let last = null;

function draw(view) {
  last = view;
  drawSummary(view);
  drawBrokers(view);
  drawPartitions(view);
  drawGroups(view);
  drawEvents(view);
  drawLab(view);
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

for (const id of ["only-problems", "show-internal"]) {
  document.getElementById(id).addEventListener("change", () => last && draw(last));
}
refresh();
setInterval(refresh, 1000);
