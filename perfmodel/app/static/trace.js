// The Predict tab's trace box: profiler traces uploaded (/api/trace, perfmodel.app.trace_upload), what they measured
// (calibrate --from-trace --format json's fields) beside the form's plan priced on the spec they calibrate.
"use strict";

function base64Of(buffer) {
  const bytes = new Uint8Array(buffer);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

async function runTrace() {
  $("trace-error").hidden = true;
  const files = await Promise.all([...$("trace-files").files].map(async (f) => ({ name: f.name, data: base64Of(await f.arrayBuffer()) })));
  $("status").textContent = "reading the trace...";
  try {
    const out = await post("/api/trace", { files, base: $("trace-base").checked ? "form" : "catalogue",
      values: values("predict"), uploads: UPLOADS.predict });
    if (out.prediction) {  // the cards and charts show the calibrated prediction until the form is edited
      ++predictSeq;
      clearTimeout(timers.predict);
      clearErrors("predict");
      drawPredict(out.prediction);
    }
    drawTrace(out);
    $("status").textContent = "";
  } catch (err) {
    $("trace-error").textContent = err.message || String(err);
    $("trace-error").hidden = false;
    $("trace-result").hidden = true;
    $("status").textContent = "refused";
  }
}

function drawTrace(out) {
  const t = out.trace, pct = (x) => (x == null ? "-" : (100 * x).toFixed(1) + "%");
  $("trace-result").hidden = false;
  $("trace-command").textContent = out.command;
  $("trace-summary").textContent = `${out.files.join(", ")}: ${t.device}, ${t.ranks} rank(s), ${t.steps} step(s) recorded.`;
  table($("trace-measured"), [
    { field: "device", value: t.device }, { field: "ranks", value: t.ranks }, { field: "steps", value: t.steps },
    { field: "step_s", value: fmtTime(t.step_s) }, { field: "gpu_busy_fraction", value: pct(t.gpu_busy_fraction) },
    { field: "host_wait_fraction", value: pct(t.host_wait_fraction) },
    { field: "launch_s", value: t.launch_s == null ? "-" : fmtTime(t.launch_s) }], ["field", "value"]);
  const e = out.prediction && out.prediction.estimate, c = out.calibrated;
  table($("trace-predicted"), e ? [
    { field: "spec", value: c.name }, { field: "step time", value: fmtTime(e.step_time_s) },
    { field: "tokens/s", value: Math.round(e.tokens_per_s).toLocaleString() }, { field: "MFU", value: pct(e.mfu) },
    { field: "fits in memory", value: e.fits_in_memory ? "yes" : "no" },
    { field: "matmul_max", value: Object.entries(c.matmul_max).map(([k, v]) => `${k} ${v}`).join(", ") },
    { field: "memory_bandwidth", value: c.memory_bandwidth }, { field: "attention_max", value: c.attention_max },
    ...(c.host_kernel_s == null ? [] : [{ field: "host per launch", value: fmtTime(c.host_kernel_s) }])] :
    [{ field: "prediction", value: "none: the trace calibrates no spec" }], ["field", "value"]);
  $("trace-why").textContent = out.why ? "No prediction: " + out.why + "." : "";
  table($("trace-kernels"), Object.entries(t.kernels).map(([k, v]) => ({ class: k, count: v.count, seconds: v.seconds })),
    ["class", "count", "seconds"]);
  table($("trace-collectives"), Object.entries(t.collectives).map(([k, v]) => ({ collective: k, ...v })),
    ["collective", "calls", "bytes", "seconds", "bus_bw_gbps"]);
  table($("trace-gemm"), Object.entries(t.gemm).sort((a, b) => b[1].seconds - a[1].seconds).slice(0, 20)
    .map(([k, v]) => ({ shape: k, ...v })), ["shape", "calls", "seconds", "tflops"]);
  $("trace-missing").replaceChildren(...t.not_calibrated.map((m) => {
    const li = document.createElement("li");
    li.textContent = `${m.what}: ${m.why}`;
    return li;
  }));
}

$("trace-run").addEventListener("click", runTrace);
