// perfmodel planner: forms built from the CLI's own flags (/api/meta), answers from the same Python functions.
"use strict";
const $ = (id) => document.getElementById(id);
let META = null;
const UPLOADS = { predict: {}, search: {}, serve: {} };   // flag -> {name, text} of an uploaded file
const DEFAULTS = {   // the other tabs' starting jobs (predict starts on the CLI's built-in example)
  search: { "--model": "llama-3-8b", "--hardware": "dgx-h100", "--gpus": "8,16,32", "--global-batch": "256",
            "--seq-len": "4096", "--top": "20" },
  forecast: { "--tokens": "1T" },
  serve: { "--model": "llama-3.1-70b", "--hardware": "dgx-h100", "--gpus": "8", "--tp": "8", "--precision": "fp8",
           "--input-len": "1000", "--output-len": "1000", "--max-throughput": true },
};
const FORM_OF = { predict: "predict", search: "search", forecast: "forecast", serve: "infer" };
const GiB = 2 ** 30;

function argvToValues(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const next = argv[i + 1];
    if (next === undefined || next.startsWith("--")) out[argv[i]] = true;
    else { out[argv[i]] = next; i++; }
  }
  return out;
}

// ---- the URL holds the inputs: #tab=predict&--tp=8&... (a plan shared as a link) ----
function saveHash(tab) {
  const p = new URLSearchParams({ tab });
  const src = tab === "export" || tab === "forecast" ? "predict" : tab;
  for (const [k, v] of Object.entries(values(src))) p.set(k, v === true ? "true" : v);
  if (tab === "forecast") for (const [k, v] of Object.entries(values("forecast"))) p.set(k, v === true ? "true" : v);
  history.replaceState(null, "", "#" + p.toString());
}

function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  const out = {};
  for (const [k, v] of p) if (k !== "tab") out[k] = v;
  return { tab: p.get("tab"), values: out };
}

// ---- requests ----
async function post(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const data = await r.json();
  if (!r.ok) throw data;
  return data;
}

function clearErrors(tab) {
  $(tab + "-error").hidden = true;
  for (const el of $("form-" + tab).querySelectorAll(".bad")) el.classList.remove("bad");
  for (const el of $("form-" + tab).querySelectorAll(".field-error")) el.textContent = "";
}

function showError(tab, err, formTab) {
  const box = $(tab + "-error");
  box.textContent = err.message || String(err);
  box.hidden = false;
  const form = $("form-" + (formTab || tab));
  const el = err.field && form.querySelector(`[data-flag="${err.field}"]`);
  if (el) {
    el.classList.add("bad");
    el.parentElement.querySelector(".field-error").textContent = err.message;
  }
}

const timers = {};
function changed(tab) {
  saveHash(tab);
  if (tab === "predict") $("import-edited").hidden = $("import-result").hidden;
  if (tab === "predict" || tab === "serve") { clearTimeout(timers[tab]); timers[tab] = setTimeout(() => RUN[tab](), 300); }
}

// ---- predict ----
let predictSeq = 0;
async function runPredict() {
  const seq = ++predictSeq;
  $("status").textContent = "predicting...";
  clearErrors("predict");
  try {
    const out = await post("/api/predict", { values: values("predict"), uploads: UPLOADS.predict });
    if (seq !== predictSeq) return;
    drawPredict(out);
    $("status").textContent = "";
  } catch (err) {
    if (seq !== predictSeq) return;
    showError("predict", err);
    $("status").textContent = "refused";
  }
}

function fmtTime(s) { return s >= 1 ? s.toFixed(3) + " s" : s >= 1e-3 ? (s * 1e3).toFixed(2) + " ms" : (s * 1e6).toFixed(1) + " us"; }

function table(el, rows, cols, onPick) {
  const t = document.createElement("table");
  t.innerHTML = "<tr>" + cols.map((c) => `<th>${c}</th>`).join("") + "</tr>";
  rows.forEach((r, i) => {
    const tr = document.createElement("tr");
    for (const c of cols) {
      const td = document.createElement("td");
      const v = r[c];
      td.textContent = typeof v === "number" ? (Number.isInteger(v) ? v.toLocaleString() : v.toPrecision(4)) : v ?? "";
      tr.append(td);
    }
    if (onPick) { tr.className = "pick"; tr.addEventListener("click", () => onPick(r, i)); }
    t.append(tr);
  });
  el.replaceChildren(t);
}

function drawPredict(out) {
  const e = out.estimate;
  $("step-time").textContent = e.step_time_s.toFixed(3) + " s";
  $("step-interval").textContent = `80% interval ${e.step_time_s_low.toFixed(3)}-${e.step_time_s_high.toFixed(3)} s`;
  $("tokens-per-s").textContent = Math.round(e.tokens_per_s).toLocaleString();
  $("mfu").textContent = (100 * e.mfu).toFixed(1) + "%";
  $("fits").textContent = e.fits_in_memory ? "yes" : "no";
  $("verdict").textContent = out.verdict;
  $("predict-table").textContent = out.table;
  const parts = Object.entries(e.time_s).filter(([, v]) => v > 0);
  Plotly.react("chart-time", [{ type: "bar", x: parts.map((p) => p[0]), y: parts.map((p) => p[1]) }],
    { title: { text: "step time by part (s, slowest stage)" }, margin: { t: 40, b: 60 } }, { displayModeBar: false });
  const kinds = ["weights", "gradients", "optimizer", "activations", "transient", "fragmentation"];
  const stages = e.memory_ranks.map((r) => `${r.stage} (${r.ranks})`);
  const mem = kinds.map((k) => ({ type: "bar", name: k, x: stages, y: e.memory_ranks.map((r) => (r.memory_bytes[k] || 0) / GiB) }));
  const line = (y, name, dash) => ({ type: "scatter", mode: "lines", name, x: stages, y: stages.map(() => y), line: { dash } });
  mem.push(line(e.memory_capacity_bytes / GiB, "capacity"), line(e.memory_budget_bytes / GiB, "budget", "dot"));
  for (const [view, symbol] of [["allocated", "circle"], ["reserved", "diamond"], ["device", "square"]]) {  // the three views
    mem.push({ type: "scatter", mode: "markers", name: view + " (view)", x: stages, marker: { symbol, size: 9, color: "#1d2733" },
               y: e.memory_ranks.map((r) => (r.memory_bytes[view] || 0) / GiB) });
  }
  Plotly.react("chart-memory", mem, { barmode: "stack", title: { text: "memory per device by stage (GiB)" }, margin: { t: 40, b: 60 } },
    { displayModeBar: false });
  const s = out.schedule, colours = { forward: "#4c9be8", recompute: "#f2b134", backward: "#2f6b3a" };
  const traces = Object.keys(colours).map((kind) => {
    const idx = s.kind.map((k, i) => (k === kind ? i : -1)).filter((i) => i >= 0);
    return { type: "bar", orientation: "h", name: kind, marker: { color: colours[kind] },
             y: idx.map((i) => "stage " + s.stage[i]), x: idx.map((i) => s.end_s[i] - s.start_s[i]),
             base: idx.map((i) => s.start_s[i]), hovertext: idx.map((i) => "micro-batch " + s.micro_batch[i]) };
  });
  Plotly.react("chart-schedule", traces, { title: { text: "pipeline schedule (s)" }, barmode: "overlay", margin: { t: 40 },
    yaxis: { autorange: "reversed" } }, { displayModeBar: false });
  table($("comm-table"), e.comms, ["name", "collective", "group", "group_size", "bytes", "calls", "total_s", "exposed_s", "priced_by"]);
  table($("op-table"), e.ops, ["name", "where", "kind", "count", "fwd_s", "bwd_s", "recompute_s", "fwd_flops", "priced_by"]);
}

// ---- search ----
async function runSearch() {
  clearErrors("search");
  $("search-progress").hidden = false;
  $("search-run").disabled = true;
  const t0 = Date.now();
  const tick = setInterval(() => { $("search-elapsed").textContent = ((Date.now() - t0) / 1000).toFixed(1) + " s"; }, 200);
  try {
    const { job } = await post("/api/search", { values: values("search"), uploads: UPLOADS.search });
    let j;
    for (;;) {
      j = await (await fetch("/api/jobs/" + job)).json();
      if (j.state !== "running") break;
      await new Promise((r) => setTimeout(r, 250));
    }
    if (j.state === "error") throw { message: j.message };
    drawSearch(j.result);
  } catch (err) {
    showError("search", err);
  } finally {
    clearInterval(tick);
    $("search-progress").hidden = true;
    $("search-run").disabled = false;
  }
}

const PLAN_FLAGS = { gpus: "--gpus", tp: "--tp", pp: "--pp", dp: "--dp", cp: "--cp", vpp: "--vpp", ep: "--ep",
  etp: "--etp", micro_batch: "--micro-batch", recompute: "--recompute", sequence_parallel: "--sequence-parallel",
  zero: "--zero", schedule: "--schedule", account_for_embedding: "--account-for-embedding",
  account_for_loss: "--account-for-loss" };
const JOB_FLAGS = ["--model", "--hardware", "--global-batch", "--seq-len", "--precision", "--attention",
  "--grad-dtype", "--stack", "--compile", "--expert-imbalance", "--moe-dispatcher", "--moe-overlap"];

function loadPlan(r) {
  const job = values("search"), v = {};
  for (const f of JOB_FLAGS) if (job[f] !== undefined) v[f] = job[f];
  for (const [k, flag] of Object.entries(PLAN_FLAGS)) if (r[k] !== undefined && r[k] !== false) v[flag] = r[k] === true ? true : String(r[k]);
  if (UPLOADS.search["--model"]) UPLOADS.predict["--model"] = UPLOADS.search["--model"];
  if (UPLOADS.search["--hardware"]) UPLOADS.predict["--hardware"] = UPLOADS.search["--hardware"];
  setValues("predict", v);
  $("import-result").hidden = true;  // the form holds a searched plan now, not the imported one
  show("predict");
  runPredict();
}

function drawSearch(out) {
  const s = out.summary, plans = out.plans;
  $("search-summary").textContent = `${s.enumerated.toLocaleString()} layouts enumerated, ${s.feasible.toLocaleString()} fit, in ${s.seconds.toFixed(2)} s`;
  const front = out.pareto || plans;
  const pick = (ev) => { const p = ev.points[0]; loadPlan(p.customdata); };
  const scatter = (x, name, data, extra) => ({ type: "scatter", mode: "markers", name, x: data.map(x), y: data.map((p) => p.step_time_s), customdata: data, ...extra });
  Plotly.react("chart-pareto-memory", [scatter((p) => p.memory_gib, "ranked plans", plans, {}),
    scatter((p) => p.memory_gib, "Pareto front", front, { marker: { size: 10, symbol: "diamond" } })],
    { title: { text: "step time (s) vs memory (GiB)" }, xaxis: { title: { text: "GiB per device" } }, margin: { t: 40 } }, { displayModeBar: false });
  Plotly.react("chart-pareto-gpus", [scatter((p) => p.gpus, "ranked plans", plans, {}),
    scatter((p) => p.gpus, "Pareto front", front, { marker: { size: 10, symbol: "diamond" } })],
    { title: { text: "step time (s) vs GPUs" }, xaxis: { title: { text: "GPUs" }, type: "log" }, margin: { t: 40 } }, { displayModeBar: false });
  for (const id of ["chart-pareto-memory", "chart-pareto-gpus"]) { $(id).removeAllListeners?.("plotly_click"); $(id).on("plotly_click", pick); }
  table($("search-table"), plans, ["gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "recompute", "sequence_parallel", "zero",
    "step_time_s", "tokens_per_s", "mfu", "memory_gib"], loadPlan);
}

// ---- export ----
function fillVersions() {
  const to = $("export-to").value;
  $("export-version").replaceChildren(...META.export[to].map((v) => new Option(v, v)));
}

async function runExport() {
  clearErrors("export");
  $("export-verdict").textContent = "exporting...";
  $("export-download").hidden = true;
  try {
    const out = await post("/api/export", { values: values("predict"), uploads: UPLOADS.predict, to: $("export-to").value,
      version: $("export-version").value, check: $("export-check").checked });
    $("export-text").textContent = out.text;
    const c = out.check;
    $("export-verdict").textContent = c ? `${c.distribution}: ${c.accepted ? "accepted" : "REFUSED: " + c.error} (ran ${c.checks.join("; ")})`
                                        : `${out.target} ${out.version} (not checked)`;
    const a = $("export-download");
    a.href = URL.createObjectURL(new Blob([out.text], { type: "text/plain" }));
    a.download = out.filename;
    a.textContent = "Download " + out.filename;
    a.hidden = false;
  } catch (err) {
    $("export-verdict").textContent = "";
    showError("export", err, "predict");
  }
}

// ---- forecast ----
async function runForecast() {
  clearErrors("forecast");
  try {
    const f = await post("/api/forecast", { values: { ...values("predict"), ...values("forecast") }, uploads: UPLOADS.predict });
    const cards = [["days", f.wall_clock_days.toFixed(1)], ["cost", "$" + Math.round(f.cost_usd).toLocaleString()],
      ["energy", (f.energy_kwh / 1000).toFixed(1) + " MWh"], ["interruptions expected", f.interruptions_expected.toFixed(1)],
      ["checkpoint every", (f.checkpoint_interval_s / 60).toFixed(1) + " min"], ["goodput", (100 * f.goodput).toFixed(1) + "%"],
      ["device-hours", Math.round(f.device_hours).toLocaleString()], ["steps", f.steps.toLocaleString()]];
    $("forecast-cards").replaceChildren(...cards.map(([k, v]) => {
      const d = document.createElement("div");
      d.className = "card";
      d.innerHTML = `<span>${k}</span><b></b>`;
      d.querySelector("b").textContent = v;
      d.dataset.key = k;
      return d;
    }));
    $("forecast-notes").textContent = (f.notes || []).join(" ");
  } catch (err) {
    showError("forecast", err, err.field && $("form-forecast").querySelector(`[data-flag="${err.field}"]`) ? "forecast" : "predict");
  }
}

// ---- serve ----
async function runServe() {
  clearErrors("serve");
  try {
    const out = await post("/api/infer", { values: values("serve"), uploads: UPLOADS.serve });
    if (out.layouts) {
      $("serve-cards").replaceChildren();
      table($("serve-table"), out.layouts.map((l) => ({ ...l.plan, ...l, plan: undefined })),
        ["tp", "pp", "dp", "ep", "batch", "output_tokens_per_s", "ttft_s", "tpot_s", "fits_in_memory"]);
      $("serve-notes").textContent = out.summary;
      return;
    }
    const cards = [["output tokens/s", Math.round(out.output_tokens_per_s).toLocaleString()], ["TTFT", fmtTime(out.ttft_s)],
      ["TPOT", fmtTime(out.tpot_s)], ["batch", Math.round(out.batch).toLocaleString()],
      ["KV cache tokens", Math.round(out.kv_cache_tokens).toLocaleString()], ["fits in memory", out.fits_in_memory ? "yes" : "no"]];
    $("serve-cards").replaceChildren(...cards.map(([k, v]) => {
      const d = document.createElement("div");
      d.className = "card";
      d.innerHTML = `<span>${k}</span><b></b>`;
      d.querySelector("b").textContent = v;
      return d;
    }));
    const keys = Object.keys(out.decode_step_s);
    Plotly.react("chart-serve-steps", [
      { type: "bar", name: "prefill", x: keys, y: keys.map((k) => out.prefill_s[k]) },
      { type: "bar", name: "decode step", x: keys, y: keys.map((k) => out.decode_step_s[k]) }],
      { title: { text: "seconds by part" }, margin: { t: 40 } }, { displayModeBar: false });
    const m = out.memory_gib, mk = ["weights", "activations", "runtime", "kv_cache"];
    Plotly.react("chart-serve-memory", [{ type: "bar", x: mk, y: mk.map((k) => m[k]) },
      { type: "scatter", mode: "lines", name: "capacity", x: mk, y: mk.map(() => m.capacity) }],
      { title: { text: "memory per GPU (GiB)" }, showlegend: false, margin: { t: 40 } }, { displayModeBar: false });
    $("serve-table").replaceChildren();
    $("serve-notes").textContent = (out.notes || []).join(" ");
  } catch (err) {
    showError("serve", err);
  }
}

const RUN = { predict: runPredict, search: runSearch, export: runExport, forecast: runForecast, serve: runServe,
  sweep: runSweep };

function show(tab) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll(".tab")) s.classList.toggle("active", s.id === "tab-" + tab);
  saveHash(tab);
  if (tab === "predict") window.dispatchEvent(new Event("resize"));
  if (tab === "sweep") sweepShown();
}

async function main() {
  META = await (await fetch("/api/meta")).json();
  for (const [name, items] of [["models", META.models], ["hardware", META.hardware]]) {
    const dl = document.createElement("datalist");
    dl.id = "list-" + name;
    dl.append(...items.map((i) => new Option(i)));
    document.body.append(dl);
  }
  const h = readHash();
  const given = Object.keys(h.values).length > 0;
  const from = (tab) => (given && (h.tab === tab || (tab === "predict" && (h.tab === "export" || h.tab === "forecast"))) ? h.values : null);
  buildForm("predict", META.fields.predict, from("predict") || argvToValues(META.example));
  buildForm("search", META.fields.search, from("search") || DEFAULTS.search);
  const planFlags = new Set(META.fields.predict.map((f) => f.flag));
  buildForm("forecast", META.fields.forecast, given && h.tab === "forecast" ? h.values : DEFAULTS.forecast, planFlags);
  buildForm("serve", META.fields.infer, from("serve") || DEFAULTS.serve);
  const run = (id, fn) => { const b = document.createElement("button"); b.type = "button"; b.className = "primary"; b.id = id; b.textContent = "Run"; b.addEventListener("click", fn); return b; };
  $("form-forecast").append(run("forecast-run", runForecast));
  $("form-serve").append(run("serve-run", runServe));
  $("export-to").replaceChildren(...Object.keys(META.export).map((t) => new Option(t, t)));
  $("export-to").addEventListener("change", fillVersions);
  fillVersions();
  $("import-from").replaceChildren(new Option("(choose)", ""), ...Object.entries(META.frameworks).map(([k, what]) => {
    const o = new Option(k, k);
    o.title = what;
    return o;
  }));
  $("import-run").addEventListener("click", runImport);
  $("search-run").addEventListener("click", runSearch);
  $("export-run").addEventListener("click", runExport);
  initSweep(given && h.tab === "sweep" ? h.values : null);
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => show(b.dataset.tab));
  show(h.tab && RUN[h.tab] ? h.tab : "predict");
  await runPredict();
  if (h.tab === "serve") runServe();
  document.body.dataset.ready = "1";
}
main();
