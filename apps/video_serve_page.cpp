// The page `mixprec video serve` shows: one HTML document with its styles and script inline, so
// the binary serves it without files or a network beyond this server. The script polls
// /api/figures twice a second, draws the ms/frame chart and posts the controls.
#include "video_serve_http.h"

namespace mixprec::app {

std::string_view live_video_page() {
  return R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mixprec live video</title>
<style>
  :root { color-scheme: dark; --bg: #111418; --panel: #1b2027; --text: #e8ecf1; --dim: #8b96a5;
          --accent: #5ec2ff; --warn: #ffb454; }
  * { box-sizing: border-box; }
  body { margin: 0; background: var(--bg); color: var(--text);
         font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; }
  header { display: flex; align-items: baseline; gap: 12px; padding: 14px 22px; }
  header h1 { font-size: 18px; margin: 0; font-weight: 600; }
  header .sub { color: var(--dim); }
  #status { margin-left: auto; color: var(--dim); }
  #status.ok::before { content: "\25CF  "; color: #58d68d; }
  #status.bad::before { content: "\25CF  "; color: #ff6b6b; }
  main { display: flex; flex-wrap: wrap; gap: 22px; padding: 0 22px 22px; }
  #streams { display: flex; flex-wrap: wrap; gap: 14px; align-content: flex-start; }
  figure { margin: 0; background: var(--panel); padding: 10px; border-radius: 8px; }
  figure img { display: block; image-rendering: pixelated; image-rendering: crisp-edges;
               background: #000; border-radius: 4px; }
  figcaption { color: var(--dim); margin-top: 6px; font-size: 12px; }
  aside { flex: 1 1 340px; max-width: 420px; display: flex; flex-direction: column; gap: 14px; }
  section { background: var(--panel); border-radius: 8px; padding: 12px 14px; }
  .big { display: flex; gap: 22px; }
  .big div { display: flex; flex-direction: column; }
  .big b { font-size: 30px; font-weight: 600; font-variant-numeric: tabular-nums; }
  .big span { color: var(--dim); font-size: 12px; }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  td { padding: 2px 0; }
  td:first-child { color: var(--dim); }
  td:last-child { text-align: right; }
  canvas { width: 100%; height: 120px; display: block; }
  .legend { color: var(--dim); font-size: 12px; }
  form { display: grid; grid-template-columns: auto 1fr auto; gap: 8px 10px; align-items: center; }
  label { color: var(--dim); }
  input, select, button { font: inherit; color: var(--text); background: #262d36;
                          border: 1px solid #38414d; border-radius: 5px; padding: 4px 8px; }
  input[type=range] { padding: 0; }
  button { cursor: pointer; }
  button.primary { background: #1f5f86; border-color: #2b7bb0; }
  #msg { color: var(--dim); min-height: 1.4em; font-size: 12px; }
  #msg.error { color: var(--warn); }
</style>
</head>
<body>
<header>
  <h1>mixprec &middot; live video</h1>
  <span class="sub" id="model"></span>
  <span id="status">connecting</span>
</header>
<main>
  <div id="streams"></div>
  <aside>
    <section class="big">
      <div><b id="fps">&ndash;</b><span>frames / s</span></div>
      <div><b id="p50">&ndash;</b><span>ms / frame p50</span></div>
      <div><b id="p99">&ndash;</b><span>p99</span></div>
    </section>
    <section>
      <canvas id="chart" width="760" height="240"></canvas>
      <div class="legend">ms per frame, last 120 frames; dashed: the frame budget</div>
    </section>
    <section>
      <table>
        <tr><td>frames generated</td><td id="frames"></td></tr>
        <tr><td>late (over the frame budget)</td><td id="late"></td></tr>
        <tr><td>dropped by slow viewers</td><td id="dropped"></td></tr>
        <tr><td>viewers</td><td id="viewers"></td></tr>
        <tr><td>precision</td><td id="precision"></td></tr>
        <tr><td>kernel level</td><td id="kernel"></td></tr>
        <tr><td>serving ms / frame (JPEG + fan-out)</td><td id="serve"></td></tr>
      </table>
    </section>
    <section>
      <form id="controls" onsubmit="return false">
        <label for="start_video">start video</label>
        <input id="start_video" type="number" min="0" max="1000000" step="1">
        <span></span>
        <label for="seed">seed</label>
        <input id="seed" type="number" min="0" max="1000000000" step="1">
        <button class="primary" id="restart">Restart</button>
        <label for="steps">steps / frame</label>
        <select id="steps"><option>1</option><option>2</option><option>4</option>
          <option>8</option><option>16</option></select>
        <span></span>
        <label for="precision_select">precision</label>
        <select id="precision_select"><option>auto</option><option>fp32</option>
          <option>bf16</option><option>fp16</option><option>autocast-bf16</option>
          <option>autocast-fp16</option></select>
        <span></span>
        <label for="context_noise">context noise</label>
        <input id="context_noise" type="range" min="0" max="0.5" step="0.01">
        <span id="context_noise_value"></span>
        <span></span><button id="pause">Pause</button><span></span>
      </form>
      <div id="msg"></div>
    </section>
  </aside>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let figures = null;

function fmt(v, digits) { return v === null || v === undefined ? "\u2013" : v.toFixed(digits); }

async function control(params) {
  const msg = $("msg");
  try {
    const r = await fetch("/api/control", { method: "POST", body: new URLSearchParams(params) });
    const answer = await r.json();
    msg.className = r.ok ? "" : "error";
    msg.textContent = r.ok ? "applied at the next frame" : answer.error;
  } catch (e) {
    msg.className = "error";
    msg.textContent = "the server did not answer";
  }
}

function makeStreams(f) {
  const size = f.streams === 1 ? 448 : 256;
  for (let i = 0; i < f.streams; ++i) {
    const fig = document.createElement("figure");
    const img = document.createElement("img");
    img.src = "/stream/" + i;
    img.width = size;
    img.height = size;
    img.alt = "stream " + i;
    const cap = document.createElement("figcaption");
    cap.id = "caption" + i;
    // A 503 (the server's viewer limit) or a stopped server ends the image's stream.
    img.onerror = () => { cap.dataset.error = "stream not available: the server stopped or has " +
                                              "all the viewers it takes (reload to retry)"; };
    fig.append(img, cap);
    $("streams").append(fig);
  }
  $("start_video").value = f.start_video;
  $("seed").value = f.seed;
  $("steps").value = f.steps;
  $("steps").disabled = f.direct;  // a direct model makes each frame in one forward
  $("precision_select").value = f.precision.startsWith("auto") ? "auto" : f.precision;
  $("context_noise").value = f.context_noise;
  $("context_noise_value").textContent = f.context_noise.toFixed(2);
}

function drawChart(f) {
  const canvas = $("chart"), g = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, values = f.recent_ms;
  const budget = f.target_fps > 0 ? 1000 / f.target_fps : null;
  const top = Math.max(budget ? budget * 1.25 : 0, ...values, 1) * 1.1;
  const y = (v) => h - 8 - (v / top) * (h - 16);
  g.clearRect(0, 0, w, h);
  g.strokeStyle = "#2c333d";
  g.lineWidth = 1;
  g.font = "20px system-ui";
  g.fillStyle = "#8b96a5";
  for (const v of [top / 4, top / 2, (3 * top) / 4]) {
    g.beginPath(); g.moveTo(0, y(v)); g.lineTo(w, y(v)); g.stroke();
    g.fillText(v.toFixed(0) + " ms", 6, y(v) - 4);
  }
  if (budget) {
    g.strokeStyle = "#ffb454";
    g.setLineDash([10, 8]);
    g.beginPath(); g.moveTo(0, y(budget)); g.lineTo(w, y(budget)); g.stroke();
    g.setLineDash([]);
  }
  g.strokeStyle = "#5ec2ff";
  g.lineWidth = 3;
  g.beginPath();
  values.forEach((v, i) => {
    const x = (i / 119) * w;
    if (i === 0) g.moveTo(x, y(v)); else g.lineTo(x, y(v));
  });
  g.stroke();
}

function show(f) {
  if (!figures) makeStreams(f);
  figures = f;
  $("status").className = f.status === "ok" ? "ok" : "bad";
  $("status").textContent = f.status === "ok" ? (f.paused ? "paused" : "live") : f.error;
  $("model").textContent =
      f.model + " model, " + f.streams + (f.streams === 1 ? " stream" : " streams batched");
  $("fps").textContent = fmt(f.fps * f.streams, 1);
  $("p50").textContent = fmt(f.ms_per_frame.p50, 1);
  $("p99").textContent = fmt(f.ms_per_frame.p99, 1);
  $("frames").textContent = f.frames;
  $("late").textContent = f.late;
  $("dropped").textContent = f.dropped;
  $("viewers").textContent = f.viewers + " / " + f.max_viewers;
  $("precision").textContent = f.precision;
  $("kernel").textContent = f.kernel_level;
  $("serve").textContent = fmt(f.serve_ms_per_frame.p50, 2);
  $("pause").textContent = f.paused ? "Resume" : "Pause";
  for (let i = 0; i < f.streams; ++i)
    $("caption" + i).textContent = $("caption" + i).dataset.error ||
        "stream " + i + " \u00b7 held-out video " + (f.start_video + i) + " \u00b7 seed " +
        (f.seed + i) + " \u00b7 " + (f.direct ? "one forward a frame" : f.steps + " steps");
  drawChart(f);
}

async function poll() {
  try {
    const r = await fetch("/api/figures", { cache: "no-store" });
    show(await r.json());
  } catch (e) {
    $("status").className = "bad";
    $("status").textContent = "disconnected";
  }
  setTimeout(poll, 500);
}

$("restart").onclick = () =>
  control({ action: "restart", start_video: $("start_video").value, seed: $("seed").value });
$("steps").onchange = () => control({ steps: $("steps").value });
$("precision_select").onchange = () => control({ precision: $("precision_select").value });
$("context_noise").oninput = () =>
  ($("context_noise_value").textContent = Number($("context_noise").value).toFixed(2));
$("context_noise").onchange = () => control({ context_noise: $("context_noise").value });
$("pause").onclick = () => control({ action: figures && figures.paused ? "resume" : "pause" });
poll();
</script>
</body>
</html>
)HTML";
}

}  // namespace mixprec::app
