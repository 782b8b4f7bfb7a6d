// perfmodel planner: the forms (built from the CLI's own flags, laid out by perfmodel.app.form_groups) and the
// config upload box. Loaded before app.js, whose globals (META, UPLOADS, post, drawPredict, ...) it uses when called.
"use strict";

// one section per group of flags (META.sections: Model, Cluster, Layout, ...), rare flags folded under "More
// settings"; each field's label is plain words, its flag and help in the tooltip
function buildForm(tab, fields, values, skip) {
  const form = $("form-" + tab);
  const sections = {}, rare = {};
  const more = document.createElement("details");
  more.className = "more";
  more.innerHTML = "<summary>More settings</summary>";
  const box = (into, key, cls) => {
    if (!into[key]) {
      into[key] = document.createElement("fieldset");
      into[key].className = cls;
      into[key].dataset.section = key;
      const legend = document.createElement("legend");
      legend.textContent = META.sections[key] || key;
      into[key].append(legend);
    }
    return into[key];
  };
  for (const f of fields) {
    if ((skip && skip.has(f.flag)) || f.section === "config") continue;  // config: the upload box gives it
    const label = field(tab, f, values);
    (f.rare ? box(rare, f.section, "sub") : box(sections, f.section, "section")).append(label);
  }
  for (const key of Object.keys(META.sections)) {
    if (sections[key]) form.append(sections[key]);
  }
  for (const key of Object.keys(META.sections)) if (rare[key]) more.append(rare[key]);
  if (Object.keys(rare).length) form.append(more);
  openFilled(tab);
}

function field(tab, f, values) {
  const label = document.createElement("label");
  label.title = f.flag + (f.help ? ": " + f.help : "");
  let input;
  if (f.kind === "checkbox") {
    label.className = "check";
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = values[f.flag] === true || values[f.flag] === "true";
    label.append(input, f.label);
  } else {
    label.append(f.label + (f.required ? " *" : ""));
    if (f.kind === "choice" && !f.open) {
      input = document.createElement("select");
      input.append(new Option(f.default ? `(default ${f.default})` : "(default)", ""));
      for (const c of f.choices) input.append(new Option(c, c));
    } else {
      input = document.createElement("input");
      input.type = "text";
      input.placeholder = f.default ? `default ${f.default}` : f.open ? "(default)" : "";
      let list = f.flag === "--model" ? "list-models" : f.flag === "--hardware" ? "list-hardware" : null;
      if (f.open) {  // a catalogue the parser also extends (a stack's release@version): suggestions, free text
        list = `list-${tab}${f.flag}`;
        const dl = document.createElement("datalist");
        dl.id = list;
        dl.append(...f.choices.map((c) => new Option(c)));
        label.append(dl);
      }
      if (list) input.setAttribute("list", list);
    }
    input.value = values[f.flag] ?? "";
    label.append(input);
  }
  input.dataset.flag = f.flag;
  input.name = f.flag;
  const err = document.createElement("div");
  err.className = "field-error";
  label.append(err);
  if (f.upload) {
    const up = document.createElement("input");
    up.type = "file";
    up.accept = ".json,.yaml,.yml";
    up.dataset.upload = f.flag;
    up.addEventListener("change", async () => {
      const file = up.files[0];
      if (file) { UPLOADS[tab][f.flag] = { name: file.name, text: await file.text() }; input.value = file.name; }
      else delete UPLOADS[tab][f.flag];
      changed(tab);
    });
    label.append(up);
  }
  input.addEventListener(f.kind === "text" || f.open ? "input" : "change", () => {
    if (f.upload && UPLOADS[tab][f.flag] && input.value !== UPLOADS[tab][f.flag].name) delete UPLOADS[tab][f.flag];
    changed(tab);
  });
  return label;
}

// a folded field that holds a value is shown: "More settings" opens
function openFilled(tab) {
  const more = $("form-" + tab).querySelector("details.more");
  if (!more) return;
  for (const el of more.querySelectorAll("[data-flag]")) {
    if (el.type === "checkbox" ? el.checked : el.value !== "") { more.open = true; return; }
  }
}

function values(tab) {
  const out = {};
  for (const el of $("form-" + tab).querySelectorAll("[data-flag]")) {
    if (el.type === "checkbox") { if (el.checked) out[el.dataset.flag] = true; }
    else if (el.value.trim() !== "" && !(UPLOADS[tab] || {})[el.dataset.flag]) out[el.dataset.flag] = el.value.trim();
  }
  return out;
}

function setValues(tab, vals) {
  for (const el of $("form-" + tab).querySelectorAll("[data-flag]")) {
    const v = vals[el.dataset.flag];
    if (el.type === "checkbox") el.checked = v === true || v === "true";
    else el.value = v ?? "";
  }
  openFilled(tab);
}

// ---- a framework's config, uploaded: predict --config FILES --from FRAMEWORK, and the form filled from it ----
async function runImport() {
  $("import-error").hidden = true;
  const files = await Promise.all([...$("import-files").files].map(async (f) => ({ name: f.name, text: await f.text() })));
  $("status").textContent = "importing...";
  try {
    const out = await post("/api/import", { files, framework: $("import-from").value, name: $("import-name").value.trim(),
      hardware: $("import-hardware").value.trim(), gpus: $("import-gpus").value.trim() });
    ++predictSeq;  // a prediction of the form still in flight is older than this one
    clearTimeout(timers.predict);
    const imp = out.import;
    UPLOADS.predict = imp.model_upload ? { "--model": imp.model_upload } : {};
    setValues("predict", imp.values);
    clearErrors("predict");
    drawPredict(out);
    drawImport(imp);
    saveHash("predict");
    $("status").textContent = "";
  } catch (err) {
    $("import-error").textContent = err.message || String(err);
    $("import-error").hidden = false;
    $("status").textContent = "refused";
  }
}

function drawImport(imp) {
  $("import-result").hidden = false;
  $("import-edited").hidden = true;
  $("import-command").textContent = imp.command;
  const n = (fate) => imp.keys.filter((k) => k.fate === fate).length;
  $("import-summary").textContent = `${imp.framework} config${imp.name ? " " + imp.name : ""} (${imp.files.join(", ")}): ` +
    `model ${imp.model}; ${n("mapped")} keys mapped, ${n("default")} framework defaults, ${n("not priced")} not priced. ` +
    "The form now holds this plan: edit it to predict again.";
  $("import-note").textContent = imp.not_in_form.length ? `The form has no field for ${imp.not_in_form.join("; ")}: ` +
    "predicting again from the form leaves them at the stack's default." : "";
  table($("import-keys"), imp.keys.map((k) => ({ key: k.key, value: k.value, fate: k.fate,
    became: k.fate === "not priced" ? k.why : k.became + (k.why ? ` (${k.why})` : ""), file: k.source })),
    ["key", "value", "fate", "became", "file"]);
}

