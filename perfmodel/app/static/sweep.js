// The Sweep tab: a finished sweep's results folder (/api/sweep, perfmodel.app.sweep_tab) as `perfmodel sweep report
// DIR --format json` reads it: every feasible point on two objectives with the Pareto front, the best point per
// objective, each axis's sensitivity and the infeasible reasons. The sweeps under perfmodel-runs/sweeps/ are listed
// (/api/sweeps) to pick from. Loaded before app.js, whose globals ($, post, table, showError, ...) it uses when called.
"use strict";

let sweepSeq = 0, sweepLoaded = false;

function initSweep(vals) {
  if (vals) for (const [id, k] of [["sweep-dir", "dir"], ["sweep-x", "x"], ["sweep-y", "y"]]) {
    if (vals[k] === undefined) continue;
    const el = $(id);
    if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === vals[k])) {
      el.append(new Option(vals[k], vals[k]));
    }
    el.value = vals[k];
  }
  $("form-sweep").addEventListener("submit", (ev) => { ev.preventDefault(); loadSweep(); });
  $("sweep-run").addEventListener("click", loadSweep);
  $("sweep-found").addEventListener("change", () => {
    if (!$("sweep-found").value) return;
    $("sweep-dir").value = $("sweep-found").value;
    loadSweep();
  });
  for (const id of ["sweep-x", "sweep-y"]) $(id).addEventListener("change", () => {
    for (const other of ["sweep-x", "sweep-y"]) $(other).dataset.flag = other.slice(6);  // picked: in the link
    saveHash("sweep");
    runSweep();
  });
}

async function listSweeps() {
  try {
    const out = await (await fetch("/api/sweeps")).json();
    const dir = $("sweep-dir").value.trim();
    const opts = out.sweeps.map((s) => {
      const o = new Option(`${s.name}: ${s.points} points, ${s.finished} of ${s.chunks} chunks`, s.dir);
      o.title = s.dir;
      return o;
    });
    $("sweep-found").replaceChildren(new Option(out.sweeps.length ? "(choose)" : "(none)", ""), ...opts);
    $("sweep-found-hint").textContent = out.sweeps.length ? `under ${out.root}/ in the server's folder, newest first`
      : `none under ${out.root}/ in the server's folder: perfmodel sweep SWEEP.yaml writes there without --out`;
    if (!dir && out.sweeps.length) $("sweep-dir").value = out.sweeps[0].dir;  // the newest, to load
    const now = $("sweep-dir").value.trim();
    $("sweep-found").value = out.sweeps.some((s) => s.dir === now) ? now : "";
  } catch (err) {
    $("sweep-found-hint").textContent = "could not list the sweeps: " + (err.message || err);
  }
}

function sweepShown() {  // the tab opened: refresh the list; load the folder the first time
  listSweeps().then(() => { if (!sweepLoaded && $("sweep-dir").value.trim()) runSweep(); });
}

function loadSweep() {  // a folder (re)loaded: its own objectives until others are picked
  $("sweep-x").replaceChildren();
  $("sweep-y").replaceChildren();
  saveHash("sweep");
  runSweep();
}

async function runSweep() {
  const seq = ++sweepSeq;
  sweepLoaded = true;
  clearErrors("sweep");
  const dir = $("sweep-dir").value.trim(), found = $("sweep-found");
  found.value = [...found.options].some((o) => o.value === dir) ? dir : "";  // the list shows the folder read
  $("status").textContent = "reading the sweep...";
  try {
    // the pickers count once chosen (or given by the link); until then the sweep's own objectives, as the CLI's
    const picked = $("sweep-x").hasAttribute("data-flag") && $("sweep-x").value !== "";
    const out = await post("/api/sweep", { dir: $("sweep-dir").value, x: picked ? $("sweep-x").value : "",
      y: picked ? $("sweep-y").value : "" });
    if (seq !== sweepSeq) return;
    drawSweep(out, picked);
    $("status").textContent = "";
  } catch (err) {
    if (seq !== sweepSeq) return;
    $("sweep-result").hidden = true;
    showError("sweep", err);
    $("status").textContent = "refused";
  }
}

function objectiveLabel(o, units) {
  const u = units[o];
  return u ? `${o} (${u.direction}, ${u.unit})` : o;
}

function drawSweep(out, picked) {
  const r = out.report, units = out.units, pts = out.points;
  const x = r.objectives[0], y = r.objectives[Math.min(1, r.objectives.length - 1)];
  for (const [id, v] of [["sweep-x", x], ["sweep-y", y]]) {
    $(id).replaceChildren(...out.objectives.map((o) => {
      const opt = new Option(o, o);
      opt.title = units[o] ? units[o].what : "";
      return opt;
    }));
    $(id).value = v;
    if (picked) $(id).dataset.flag = id.slice(6); else $(id).removeAttribute("data-flag");
  }
  saveHash("sweep");
  $("sweep-result").hidden = false;
  $("sweep-summary").textContent = `sweep ${r.name}: ${r.feasible_points.toLocaleString()} of `
    + `${r.points.toLocaleString()} points feasible (${r.rows.toLocaleString()} of `
    + `${r.expected_rows.toLocaleString()} rows finished`
    + (r.rows < r.expected_rows ? ": still running, or stopped; Load again to read the chunks since" : "") + ").";
  $("sweep-command").textContent = out.command;
  const hover = (row) => [`point ${row.point} · ${row.system}`, ...out.point_axes.map((a) => `${a} = ${row[a]}`),
    ...r.objectives.map((o) => `${o} = ${typeof row[o] === "number" ? row[o].toPrecision(4) : row[o]}`)].join("<br>");
  const rows = pts.point.map((_, i) => Object.fromEntries(Object.keys(pts).map((k) => [k, pts[k][i]])));
  const one = x === y;  // a single objective: its value by point
  const xs = (rs) => rs.map((p) => (one ? p.point : p[x]));
  const front = [...r.pareto].sort((a, b) => (one ? a.point - b.point : a[x] - b[x]));
  const onTwo = r.objectives.length <= 2;  // the front of the two drawn: a line; of more, its points only
  const logOf = (v) => {  // a log axis where the values span more than 100x
    const f = v.filter((t) => t > 0);
    return f.length && f.reduce((a, b) => Math.max(a, b)) / f.reduce((a, b) => Math.min(a, b)) > 100 ? "log" : "linear";
  };
  const shown = rows.filter((p) => p[y] != null && (one || p[x] != null));
  Plotly.react("chart-sweep-front", [
    { type: shown.length > 5000 ? "scattergl" : "scatter", mode: "markers", name: `feasible points (${shown.length})`,
      x: xs(shown), y: shown.map((p) => p[y]), marker: { color: "#9aa3ad", size: 6 }, text: shown.map(hover),
      hoverinfo: "text" },
    { type: "scatter", mode: onTwo && !one ? "lines+markers" : "markers",
      name: `Pareto front (${front.length})` + (onTwo ? "" : ` on all ${r.objectives.length} objectives`),
      x: xs(front), y: front.map((p) => p[y]), marker: { color: "#d62728", size: 9 }, line: { color: "#d62728" },
      text: front.map(hover), hoverinfo: "text" }],
    { title: { text: "feasible points and the Pareto front" }, margin: { t: 40, b: 90 },
      legend: { orientation: "h", y: -0.4 },
      xaxis: { title: { text: one ? "point" : objectiveLabel(x, units) }, type: one ? "linear" : logOf(xs(shown)) },
      yaxis: { title: { text: objectiveLabel(y, units) }, type: logOf(shown.map((p) => p[y])) } },
    { displayModeBar: false });
  const sens = r.sensitivity;
  Plotly.react("chart-sweep-sobol", r.objectives.map((o) => ({ type: "bar", name: o, x: r.axes,
    y: r.axes.map((a) => (sens.find((s) => s.axis === a && s.objective === o) || {}).sobol_first ?? 0) })),
    { title: { text: "which axis moves each objective (first-order Sobol' index)" }, barmode: "group",
      margin: { t: 40 }, yaxis: { range: [0, 1] }, legend: { orientation: "h", y: -0.25 } }, { displayModeBar: false });
  const cols = ["point", "system", ...out.point_axes, ...r.objectives];
  table($("sweep-best"), Object.entries(r.best).map(([o, row]) => ({ objective: `${o} (${r.directions[o]})`, ...row })),
    ["objective", ...cols]);
  table($("sweep-pareto"), front, cols);
  table($("sweep-sensitivity"), sens, ["axis", "objective", "elasticity", "sobol_first"]);
  const bad = Object.entries(r.infeasible);
  table($("sweep-infeasible"), bad.map(([reason, n]) => ({ "workload: reason": reason, points: n })),
    ["workload: reason", "points"]);
  $("sweep-infeasible-none").hidden = bad.length > 0;
  $("sweep-infeasible").hidden = bad.length === 0;
}
