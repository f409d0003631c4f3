// The live map of a superpeer swarm or peer: snapshots arrive as
// server-sent events (/events); the page draws them on canvases and keeps
// its counts in data attributes of <body> (data-peers, data-superpeers, ...).
"use strict";

const COLORS = {
  superpeer: "#d62728", client: "#1f77b4", holder: "#9467bd", unserved: "#ff7f0e",
  unknown: "#aaaaaa", neighbour: "#2ca02c", dead: "#555555",
};
const ROLE_ORDER = ["dead", "unknown", "neighbour", "unserved", "client", "holder", "superpeer"];
const GROUP_COLORS = ["#e6f0fa", "#fdeee0", "#e8f5e6", "#f3e8f7", "#fbe9e9", "#eef3e0", "#e4f4f5", "#f7f0de"];
const KILL_FLASH_MS = 6000;

const $ = (id) => document.getElementById(id);
let snap = null;          // the latest snapshot
let selected = -1;        // index of the selected peer
let view = null;          // the coordinate canvas's transform, for hit tests
const history = [];       // [t, client RTT, msgs/peer/s]
const killSeen = new Map(); // event seq -> time it was first seen here
let drawPending = false;

// ---- the stream ----
function connect() {
  const es = new EventSource("events");
  es.addEventListener("snapshot", (ev) => {
    snap = JSON.parse(ev.data);
    document.body.dataset.connected = "true";
    onSnapshot();
  });
  es.onerror = () => {
    document.body.dataset.connected = "false";
    status("connection lost, retrying…", true);
  };
}

function status(msg, error) {
  const s = $("status");
  s.textContent = msg;
  s.className = error ? "error" : "";
}

function onSnapshot() {
  const s = snap;
  const b = document.body.dataset;
  b.mode = s.mode;
  b.method = s.method || "";
  b.stage = s.stage.name || "";
  b.n = s.n;
  b.peers = s.live;
  b.superpeers = s.superpeers;
  b.target = s.target;
  b.killed = s.killed;
  b.ready = s.ready;
  b.paused = s.paused;
  b.seq = s.seq;
  b.tookMs = s.took_ms;
  $("mode").textContent = s.mode === "peer" ? "one peer's view" : "swarm";
  $("method").textContent = s.method || "—";
  $("stage").textContent = stageText(s);
  $("live").textContent = s.live;
  $("n").textContent = s.mode === "peer" ? "~" + s.n + " in the network" : s.n;
  $("sps").textContent = s.superpeers;
  $("target").textContent = s.target;
  $("killed").textContent = s.killed;
  $("kill-superpeer").disabled = !(s.ready && s.superpeers > 0) || s.paused;
  $("kill-fraction").disabled = !s.ready || s.paused;
  $("pause").textContent = s.paused ? "resume" : "pause";
  $("pause").classList.toggle("on", s.paused);
  $("spread").textContent = s.spread > 0 ? "(2-D projection keeping " + Math.round(s.spread * 100) + "% of the spread)" : "";
  $("cap").textContent = s.capacity ? "(capacity " + s.capacity + ")" : "";
  $("self-box").hidden = s.mode !== "peer";
  $("ring-title").textContent = s.groups && s.groups.length ? "key space: " + s.groups.length + " prefix groups" : "key space";
  if (!s.paused) {
    const f = s.figures;
    history.push([s.t, f.client_rtt_ms, f.msgs_per_peer_s]);
    if (history.length > 240) history.shift();
  }
  for (const e of s.events || []) if (!killSeen.has(e.seq)) killSeen.set(e.seq, performance.now());
  if (s.paused) status("paused: the swarm runs on, the map waits");
  else if ($("status").textContent.startsWith("paused") || $("status").textContent.startsWith("connection")) status("");
  figures();
  events();
  selfView();
  showSelected();
  schedule();
}

function stageText(s) {
  const st = s.stage || {};
  if (st.name === "live") return s.mode === "peer" ? "live" : "live: reported, running until interrupted";
  if (!st.total) return st.name || "starting";
  return st.name + " " + st.done + "/" + st.total;
}

// ---- drawing ----
function schedule() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    if (!snap) return;
    const t0 = performance.now();
    drawCoords();
    drawRing();
    drawLoads();
    drawSpark();
    document.body.dataset.drawMs = (performance.now() - t0).toFixed(1);
    // Keep animating while a kill flashes.
    const now = performance.now();
    for (const [, t] of killSeen) if (now - t < KILL_FLASH_MS) { schedule(); break; }
  });
}

function sized(canvas) {
  const r = canvas.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(10, Math.round(r.width)), h = Math.max(10, Math.round(r.height));
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) {
    canvas.width = w * dpr;
    canvas.height = h * dpr;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return [ctx, w, h];
}

function quantile(sorted, q) {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))))];
}

function radius(p) {
  const base = p.role === "superpeer" ? 5 : p.role === "holder" ? 4 : 2.2;
  return base + Math.min(6, Math.max(0, p.h / 8));
}

function drawCoords() {
  const [ctx, w, h] = sized($("coords"));
  const peers = snap.peers.filter((p) => p.pos);
  if (!peers.length) {
    ctx.fillStyle = "#999";
    ctx.fillText(snap.mode === "peer" ? "no coordinates yet (a method with coordinates runs Vivaldi)" : "waiting for Vivaldi coordinates…", 14, 22);
    view = null;
    return;
  }
  // Robust bounds: a few outliers must not squash the rest.
  const xs = peers.map((p) => p.x).sort((a, b) => a - b);
  const ys = peers.map((p) => p.y).sort((a, b) => a - b);
  const q = peers.length > 50 ? 0.01 : 0;
  let x0 = quantile(xs, q), x1 = quantile(xs, 1 - q), y0 = quantile(ys, q), y1 = quantile(ys, 1 - q);
  const span = Math.max(x1 - x0, y1 - y0, 1);
  const pad = 24;
  const k = Math.min((w - 2 * pad) / Math.max(x1 - x0, span * 0.2), (h - 2 * pad) / Math.max(y1 - y0, span * 0.2));
  const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
  const X = (x) => w / 2 + (x - cx) * k, Y = (y) => h / 2 - (y - cy) * k;
  view = { X, Y, peers };
  const byI = new Map(snap.peers.map((p) => [p.i, p]));

  // Scale bar.
  const ms = niceStep(80 / k);
  ctx.strokeStyle = "#999"; ctx.fillStyle = "#777"; ctx.lineWidth = 1;
  ctx.beginPath(); ctx.moveTo(12, h - 12); ctx.lineTo(12 + ms * k, h - 12); ctx.stroke();
  ctx.fillText(ms + " ms", 14, h - 16);

  // Client -> superpeer links, one path.
  ctx.strokeStyle = "rgba(31,119,180,0.22)";
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const p of peers) {
    if (p.sp < 0 || p.sp === p.i || p.role === "dead") continue;
    const s = byI.get(p.sp);
    if (!s || !s.pos) continue;
    ctx.moveTo(X(p.x), Y(p.y));
    ctx.lineTo(X(s.x), Y(s.y));
  }
  ctx.stroke();

  // Token trails: the holders a token passed through, dashed, fading.
  for (const t of snap.tokens || []) {
    const pts = (t.trail || []).map((i) => byI.get(i)).filter((p) => p && p.pos);
    if (pts.length < 2) continue;
    ctx.setLineDash([4, 3]);
    ctx.lineWidth = 1.5;
    for (let j = 1; j < pts.length; j++) {
      ctx.strokeStyle = "rgba(148,103,189," + (0.25 + 0.75 * j / (pts.length - 1)).toFixed(2) + ")";
      ctx.beginPath();
      ctx.moveTo(X(pts[j - 1].x), Y(pts[j - 1].y));
      ctx.lineTo(X(pts[j].x), Y(pts[j].y));
      ctx.stroke();
    }
    ctx.setLineDash([]);
    for (const p of pts.slice(0, -1)) {
      ctx.fillStyle = "rgba(148,103,189,0.5)";
      ctx.fillRect(X(p.x) - 1.5, Y(p.y) - 1.5, 3, 3);
    }
  }

  // Peers by role, one path per role; dead peers as crosses.
  for (const role of ROLE_ORDER) {
    const ps = peers.filter((p) => p.role === role);
    if (!ps.length) continue;
    if (role === "dead") {
      ctx.strokeStyle = "rgba(80,80,80,0.6)";
      ctx.lineWidth = 1.2;
      ctx.beginPath();
      for (const p of ps) {
        const x = X(p.x), y = Y(p.y);
        ctx.moveTo(x - 3, y - 3); ctx.lineTo(x + 3, y + 3);
        ctx.moveTo(x + 3, y - 3); ctx.lineTo(x - 3, y + 3);
      }
      ctx.stroke();
      continue;
    }
    ctx.fillStyle = COLORS[role] || "#888";
    ctx.beginPath();
    for (const p of ps) {
      const x = X(p.x), y = Y(p.y), r = radius(p);
      ctx.moveTo(x + r, y);
      ctx.arc(x, y, r, 0, 2 * Math.PI);
    }
    ctx.fill();
    if (role === "superpeer" || role === "holder") {
      ctx.strokeStyle = "#fff"; ctx.lineWidth = 1.5; ctx.stroke();
    }
  }
  // Token labels.
  ctx.font = "bold 11px system-ui, sans-serif";
  for (const t of snap.tokens || []) {
    for (const i of t.holders || []) {
      const p = byI.get(i);
      if (!p || !p.pos) continue;
      ctx.fillStyle = t.holders.length > 1 ? COLORS.unserved : "#4b2a6b";
      ctx.fillText("T" + t.id + (t.settled ? "" : "…"), X(p.x) + radius(p) + 2, Y(p.y) - radius(p));
    }
  }
  // The peer itself (peer mode) and the selected one.
  if (snap.mode === "peer") ring(ctx, byI.get(snap.self), X, Y, "#000", 9);
  if (selected >= 0) ring(ctx, byI.get(selected), X, Y, "#222", 8);

  // Kills as they happen: an expanding red ring where each victim stood.
  const now = performance.now();
  for (const e of snap.events || []) {
    if (e.kind !== "kill") continue;
    const age = now - (killSeen.get(e.seq) || 0);
    if (age > KILL_FLASH_MS) continue;
    const a = 1 - age / KILL_FLASH_MS;
    ctx.strokeStyle = "rgba(214,39,40," + a.toFixed(2) + ")";
    ctx.lineWidth = 2;
    for (const i of e.peers || []) {
      const p = byI.get(i);
      if (!p || !p.pos) continue;
      ctx.beginPath();
      ctx.arc(X(p.x), Y(p.y), 6 + 30 * (1 - a), 0, 2 * Math.PI);
      ctx.stroke();
    }
  }
}

function ring(ctx, p, X, Y, color, r) {
  if (!p || !p.pos) return;
  ctx.strokeStyle = color; ctx.lineWidth = 2;
  ctx.beginPath(); ctx.arc(X(p.x), Y(p.y), r + radius(p), 0, 2 * Math.PI); ctx.stroke();
}

function niceStep(x) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(x, 1e-3))));
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

function drawRing() {
  const [ctx, w, h] = sized($("ring"));
  const cx = w / 2, cy = h / 2, R = Math.min(w, h) / 2 - 22;
  const ang = (k) => 2 * Math.PI * k - Math.PI / 2;
  const at = (k, r) => [cx + r * Math.cos(ang(k)), cy + r * Math.sin(ang(k))];
  const byI = new Map(snap.peers.map((p) => [p.i, p]));
  // Groups as arcs, each with its superpeer.
  const groups = snap.groups || [];
  groups.forEach((g, j) => {
    ctx.fillStyle = GROUP_COLORS[j % GROUP_COLORS.length];
    ctx.beginPath();
    ctx.moveTo(cx, cy);
    ctx.arc(cx, cy, R + 14, ang(g.start), ang(g.start + g.share));
    ctx.closePath();
    ctx.fill();
    ctx.strokeStyle = "#ccc"; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(cx, cy); ctx.lineTo(...at(g.start, R + 14)); ctx.stroke();
    const [lx, ly] = at(g.start + g.share / 2, R * 0.55);
    ctx.fillStyle = "#555"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "center";
    const sp = byI.get(g.sp);
    ctx.fillText("g" + g.g + (sp ? " → " + sp.i : snap.mode === "peer" ? "" : " (none)"), lx, ly);
    if (sp) {
      ctx.strokeStyle = g.sp === g.expected || g.expected < 0 ? "rgba(214,39,40,0.6)" : COLORS.unserved;
      ctx.beginPath(); ctx.moveTo(lx, ly + 3); ctx.lineTo(...at(sp.k, R - 6)); ctx.stroke();
    }
  });
  ctx.textAlign = "start";
  ctx.strokeStyle = "#bbb"; ctx.lineWidth = 1;
  ctx.beginPath(); ctx.arc(cx, cy, R, 0, 2 * Math.PI); ctx.stroke();
  for (const role of ROLE_ORDER) {
    const ps = snap.peers.filter((p) => p.role === role);
    if (!ps.length) continue;
    ctx.fillStyle = role === "dead" ? "rgba(80,80,80,0.4)" : COLORS[role];
    ctx.beginPath();
    for (const p of ps) {
      const r = role === "superpeer" ? 4.5 : role === "holder" ? 3.5 : 2;
      const [x, y] = at(p.k, R);
      ctx.moveTo(x + r, y);
      ctx.arc(x, y, r, 0, 2 * Math.PI);
    }
    ctx.fill();
  }
  ctx.fillStyle = "#888"; ctx.font = "10px system-ui, sans-serif";
  ctx.fillText("0", cx + 3, cy - R - 6);
}

function drawLoads() {
  const canvas = $("loads");
  const loads = (snap.loads || []).slice().sort((a, b) => b.load - a.load);
  const [ctx, w, h] = sized(canvas);
  if (!loads.length) {
    ctx.fillStyle = "#999"; ctx.fillText("no superpeer yet", 10, 20);
    return;
  }
  const cap = snap.capacity || Math.max(...loads.map((l) => l.load), 1);
  const shown = loads.slice(0, Math.max(1, Math.floor((w - 30) / 6)));
  const bw = Math.min(28, (w - 30) / shown.length);
  const H = h - 26;
  shown.forEach((l, j) => {
    const x = 26 + j * bw;
    const bh = Math.min(1.1, l.load / cap) * H / 1.1;
    ctx.fillStyle = l.load > cap ? COLORS.unserved : COLORS.superpeer;
    ctx.fillRect(x, 6 + H - bh, Math.max(1, bw - 2), bh);
    if (bw >= 18) {
      ctx.fillStyle = "#555"; ctx.font = "9px system-ui, sans-serif"; ctx.textAlign = "center";
      ctx.fillText(String(l.sp), x + bw / 2 - 1, h - 8);
    }
  });
  ctx.textAlign = "start";
  const capY = 6 + H - H / 1.1;
  ctx.strokeStyle = "#333"; ctx.setLineDash([3, 3]);
  ctx.beginPath(); ctx.moveTo(22, capY); ctx.lineTo(w - 4, capY); ctx.stroke(); ctx.setLineDash([]);
  ctx.fillStyle = "#333"; ctx.font = "10px system-ui, sans-serif";
  ctx.fillText(String(cap), 2, capY + 3);
  ctx.fillText("0", 2, 6 + H);
  if (shown.length < loads.length) ctx.fillText("+" + (loads.length - shown.length) + " more", w - 60, 14);
}

function drawSpark() {
  const [ctx, w, h] = sized($("spark"));
  if (history.length < 2) return;
  const series = [[1, COLORS.superpeer, "client RTT"], [2, "#555", "msgs/peer/s"]];
  series.forEach(([k, color, label], j) => {
    const vals = history.map((r) => r[k]);
    const max = Math.max(...vals, 1e-9);
    ctx.strokeStyle = color; ctx.lineWidth = 1.2;
    ctx.beginPath();
    history.forEach((r, i) => {
      const x = 4 + (w - 8) * i / (history.length - 1);
      const y = h - 4 - (h - 16) * r[k] / max;
      i ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = color; ctx.font = "10px system-ui, sans-serif";
    ctx.fillText(label + " (max " + fmt(max) + ")", 6 + j * 150, 11);
  });
}

// ---- panels ----
function fmt(x, d = 1) {
  if (x === undefined || x === null || Number.isNaN(x)) return "—";
  return Number(x).toFixed(d);
}

function figures() {
  const f = snap.figures;
  const rows = [];
  if (snap.mode === "peer") {
    rows.push(["predicted RTT to " + (snap.peers[0] && snap.peers[0].role === "superpeer" ? "its clients (mean)" : "its superpeer"), f.served ? fmt(f.client_rtt_ms) + " ms" : "—"]);
    rows.push(["own Vivaldi error estimate", fmt(f.vivaldi_median, 3)]);
    rows.push(["messages sent per second", fmt(f.msgs_per_peer_s, 2)]);
  } else {
    const ratio = (a, b) => (a > 0 && b > 0 ? " (" + (a / b).toFixed(2) + "×)" : "");
    rows.push(["mean client RTT", f.served ? fmt(f.client_rtt_ms) + " ms" : "—"]);
    rows.push(["  S random superpeers", f.random_rtt_ms ? fmt(f.random_rtt_ms) + " ms" + ratio(f.client_rtt_ms, f.random_rtt_ms) : "—"]);
    rows.push(["  greedy k-median", f.kmedian_rtt_ms ? fmt(f.kmedian_rtt_ms) + " ms" + ratio(f.client_rtt_ms, f.kmedian_rtt_ms) : "—"]);
    rows.push(["clients served / unserved / wrong", f.served + " / " + f.unserved + " / " + f.wrong]);
    rows.push(["Vivaldi error median / p90", f.vivaldi_median ? fmt(f.vivaldi_median, 3) + " / " + fmt(f.vivaldi_p90, 3) : "—"]);
    rows.push(["messages per peer per second", fmt(f.msgs_per_peer_s, 2)]);
  }
  if (snap.method === "repel") rows.push(["token moves / mints / fencings", f.moves + " / " + f.minted + " / " + f.fenced]);
  rows.push(["snapshot taken in", fmt(snap.took_ms) + " ms"]);
  const tb = $("figures").tBodies[0];
  tb.replaceChildren(...rows.map(([k, v]) => {
    const tr = document.createElement("tr");
    const a = document.createElement("td"); a.textContent = k;
    const b = document.createElement("td"); b.className = "v"; b.textContent = v;
    tr.append(a, b);
    return tr;
  }));
}

function events() {
  const list = $("events");
  const evs = (snap.events || []).slice(-30).reverse();
  list.replaceChildren(...evs.map((e) => {
    const li = document.createElement("li");
    li.className = e.kind;
    let text = fmt(e.t) + " s  ";
    if (e.kind === "kill") {
      const n = (e.peers || []).length;
      text += "killed " + (n === 1 ? "peer " + e.peers[0] : n + " peers") + (e.superpeers ? " (" + e.superpeers + " superpeer" + (e.superpeers > 1 ? "s" : "") + ")" : "") + (e.why ? ": " + e.why : "");
    } else {
      text += e.count + " " + e.kind;
    }
    li.textContent = text;
    return li;
  }));
}

function selfView() {
  if (snap.mode !== "peer") return;
  const me = snap.peers[snap.self];
  const count = (r) => snap.peers.filter((p) => p.role === r).length;
  const rows = [
    ["peer", "…" + me.id],
    ["role", me.role],
    ["superpeer", me.sp >= 0 && me.sp !== me.i ? "…" + snap.peers[me.sp].id : me.role === "superpeer" ? "itself" : "none"],
    ["clients", me.role === "superpeer" ? String(count("client")) : "—"],
    ["routing-table neighbours", String(count("neighbour") + count("holder") + count("superpeer") - (me.role === "superpeer" ? 1 : 0))],
    ["known tokens", (snap.tokens || []).map((t) => "T" + t.id + "@…" + snap.peers[t.holder].id).join(" ") || "—"],
  ];
  $("self").tBodies[0].replaceChildren(...rows.map(([k, v]) => {
    const tr = document.createElement("tr");
    const a = document.createElement("td"); a.textContent = k;
    const b = document.createElement("td"); b.className = "v"; b.textContent = v;
    tr.append(a, b);
    return tr;
  }));
}

function showSelected() {
  const el = $("selected");
  const p = snap && selected >= 0 ? snap.peers.find((q) => q.i === selected) : null;
  if (!p) { el.textContent = ""; selected = -1; updateKillLabel(null); return; }
  const sp = p.sp >= 0 && p.sp !== p.i ? " → superpeer " + p.sp : "";
  const load = (snap.loads || []).find((l) => l.sp === p.i);
  el.textContent = "peer " + p.i + " (…" + p.id + "): " + p.role + sp + (p.g >= 0 ? ", group " + p.g : "") +
    (load ? ", " + load.load + "/" + (load.capacity || "∞") + " clients" : "") +
    (p.pos ? ", at (" + fmt(p.x) + ", " + fmt(p.y) + ") ms, height " + fmt(p.h) + " ms" : "");
  updateKillLabel(p);
}

function updateKillLabel(p) {
  $("kill-superpeer").textContent = p && p.role === "superpeer" ? "kill superpeer " + p.i : "kill a superpeer";
}

// ---- controls ----
async function post(path, params) {
  try {
    const r = await fetch(path, { method: "POST", body: new URLSearchParams(params) });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) { status(body.error || r.statusText, true); return null; }
    return body;
  } catch (e) {
    status(String(e), true);
    return null;
  }
}

$("kill-superpeer").addEventListener("click", async () => {
  const p = snap && snap.peers.find((q) => q.i === selected);
  const params = p && p.role === "superpeer" ? { peer: String(p.i) } : { superpeer: "any" };
  const r = await post("api/kill", params);
  if (r) { status("killed peer " + r.killed.join(", ")); document.body.dataset.kills = String(Number(document.body.dataset.kills || 0) + 1); }
});
$("kill-fraction").addEventListener("click", async () => {
  const r = await post("api/kill", { fraction: $("fraction").value });
  if (r) { status("killed " + r.killed.length + " peers (" + r.superpeers + " superpeers)"); document.body.dataset.kills = String(Number(document.body.dataset.kills || 0) + 1); }
});
$("pause").addEventListener("click", async () => {
  await post("api/pause", { paused: String(!(snap && snap.paused)) });
});
$("coords").addEventListener("click", (ev) => {
  if (!view) return;
  const r = $("coords").getBoundingClientRect();
  const x = ev.clientX - r.left, y = ev.clientY - r.top;
  let best = -1, bd = 12 * 12;
  for (const p of view.peers) {
    const dx = view.X(p.x) - x, dy = view.Y(p.y) - y, d = dx * dx + dy * dy;
    if (d < bd) { bd = d; best = p.i; }
  }
  selected = best;
  showSelected();
  schedule();
});
window.addEventListener("resize", schedule);

connect();
