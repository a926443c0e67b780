// The fleet console's page: polls the collector's read-only API every two seconds and
// renders it; the admin's actions POST JSON with the token from this tab's sessionStorage
// (builder/rollout/console.py says why that keeps other sites from acting). Every value
// from the collector goes into the page as text, never as markup: a device names its own
// failed health check, and a crafted one must stay text.
"use strict";

const POLL_MS = 2000;
const TOKEN_KEY = "fleet-console-token";
const EVENTS = ["offered", "downloaded", "staged", "green", "rolled_back", "silent"];
// openLogs: the devices whose failure log the admin unfolded, kept across re-renders.
const state = { overview: null, devices: null, cards: new Map(), busy: false, openLogs: new Set() };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return node;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function headers(extra) {
  const all = Object.assign({ Accept: "application/json" }, extra || {});
  if (token()) all.Authorization = "Bearer " + token();
  return all;
}

function utc(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function duration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  if (seconds >= 86400) return Math.floor(seconds / 86400) + " d " + Math.floor(seconds % 86400 / 3600) + " h";
  if (seconds >= 3600) return Math.floor(seconds / 3600) + " h " + Math.floor(seconds % 3600 / 60) + " min";
  if (seconds >= 60) return Math.floor(seconds / 60) + " min";
  return seconds + " s";
}

function ago(now, seconds) {
  return seconds === null || seconds === undefined ? "never" : duration(now - seconds) + " ago";
}

async function getJson(path) {
  const response = await fetch(path, { headers: headers(), cache: "no-store" });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || path + ": HTTP " + response.status);
  return body;
}

async function poll() {
  try {
    const [overview, devices, verdicts] = await Promise.all([
      getJson("/api/overview"), getJson("/api/devices"), getJson("/api/verdicts?limit=50")]);
    state.overview = overview;
    state.devices = devices;
    renderRollouts(overview);
    renderDevices(overview.now, devices);
    renderTimeline(overview.now, verdicts.verdicts);
    renderHistory(overview);
    document.getElementById("error").textContent = "";
    const updated = document.getElementById("updated");
    updated.textContent = "Updated " + utc(overview.now);
    updated.dataset.now = String(overview.now);
  } catch (error) {
    document.getElementById("error").textContent = error.message;
  }
}

function renderRollouts(overview) {
  const box = document.getElementById("rollouts");
  const refs = Object.keys(overview.rollouts);
  if (refs.length === 0) {
    box.replaceChildren(el("p", { text: "No rollout is published on this site." }));
    state.cards.clear();
    return;
  }
  for (const ref of [...state.cards.keys()]) {
    if (!refs.includes(ref)) { state.cards.get(ref).card.remove(); state.cards.delete(ref); }
  }
  if (!box.querySelector("article")) box.replaceChildren();
  for (const ref of refs) {
    let entry = state.cards.get(ref);
    if (!entry) { entry = makeCard(ref); state.cards.set(ref, entry); box.append(entry.card); }
    fillCard(entry, overview.rollouts[ref], overview);
  }
}

function makeCard(ref) {
  const id = "rollout-" + ref.replace(/[^A-Za-z0-9_-]/g, "-");
  const card = el("article", { class: "rollout", "data-ref": ref, "aria-labelledby": id + "-title" });
  const title = el("h3", { id: id + "-title" });
  const data = el("div", { class: "data" });
  const reason = el("input", { id: id + "-reason", type: "text", maxlength: "200", name: "reason" });
  const force = el("input", { id: id + "-force", type: "checkbox", name: "force" });
  const buttons = {};
  for (const name of ["advance", "halt", "resume"]) {
    buttons[name] = el("button", { type: "button", "data-action": name, text: name[0].toUpperCase() + name.slice(1) });
    buttons[name].addEventListener("click", () => act(ref, name, reason, force));
  }
  const note = el("p", { class: "help" });
  const form = el("fieldset", { class: "actions" }, el("legend", { text: "Actions" }),
    el("span", { class: "field" }, buttons.advance, force,
      el("label", { for: id + "-force", text: "even if the wave is not ready" })),
    el("span", { class: "field" },
      el("label", { for: id + "-reason", text: "Halt reason" }), reason, buttons.halt),
    el("span", { class: "field" }, buttons.resume), note);
  card.append(title, data, form);
  return { card, title, data, buttons, note };
}

function fillCard(entry, report, overview) {
  if (report.error) {
    entry.title.textContent = report.ref;
    entry.data.replaceChildren(el("p", { class: "error", text: report.error }));
    return;
  }
  entry.card.dataset.state = report.state;
  entry.title.replaceChildren(report.ref + " — rollout " + report.rollout + " ",
    el("span", { class: "state state-" + report.state, "data-field": "state", text: report.state }));
  const parts = [el("p", {},
    "Commit ", el("code", { text: report.commit.slice(0, 12), title: report.commit }),
    " · statement signed " + utc(report.statement_issued) + ", valid until " + utc(report.statement_expires))];
  if (report.reason) parts.push(el("p", { class: "reason", "data-field": "reason", text: "Reason: " + report.reason }));
  parts.push(wavesTable(report, overview.now));
  if (report.budget) parts.push(budgetList(report.budget));
  if (report.held && report.held.length) parts.push(heldList(report.held));
  const refused = Object.entries(report.refused).map(([k, v]) => k + " " + v).join(", ") || "none";
  parts.push(el("p", { class: "help", text: "Refused verdicts: " + refused + "; resent copies: " + report.duplicates }));
  entry.data.replaceChildren(...parts);
  const allowed = { advance: report.state === "active", halt: report.state === "active", resume: report.state === "halted" };
  for (const [name, button] of Object.entries(entry.buttons)) {
    button.disabled = state.busy || !overview.actions_enabled || !overview.can_sign || !allowed[name];
  }
  entry.note.textContent = !overview.actions_enabled
    ? "Read-only: the collector was started without --admin-token-file."
    : !overview.can_sign ? "Read-only: the collector has no release key to sign the statement."
    : token() ? "" : "Enter the admin token above to act.";
}

function wavesTable(report, now) {
  const head = el("tr", {}, ...["Wave", "Green", "Soak", "Offered", "Downloaded", "Staged",
    "Green", "Rolled back", "Silent"].map((name) => el("th", { scope: "col", text: name })));
  const failures = [];
  const rows = report.waves.map((wave) => {
    const soak = !wave.open ? "not open"
      : wave.soaked_seconds >= wave.soak_seconds ? "soaked"
      : duration(wave.soak_seconds - wave.soaked_seconds) + " left";
    const bar = progressBar(wave);
    for (const [check, n] of Object.entries(wave.failed_checks)) {
      failures.push(el("li", { text: "wave " + wave.wave + ": " + n + " × " + check }));
    }
    return el("tr", { "data-wave": wave.wave },
      el("th", { scope: "row" }, wave.wave + ". " + wave.name,
        el("div", { class: "help", text: wave.selector + " · green ≥ " + wave.success_threshold +
          "% · halt > " + wave.halt_threshold + "%" })),
      el("td", {}, bar, el("div", { class: "help", text: wave.green + " of " + wave.offered + " green" })),
      el("td", { "data-field": "soak", text: soak }),
      ...EVENTS.map((name) => el("td", { class: "count", "data-field": name, text: wave[name] })));
  });
  return el("div", {},
    el("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": "waves of " + report.ref },
      el("table", { class: "waves" }, el("thead", {}, head), el("tbody", {}, ...rows))),
    failures.length ? el("ul", { class: "failed", "aria-label": "failed health checks" }, ...failures) : null);
}

// One bar per wave, of the devices offered: green, rolled back, staged (not judged yet),
// downloaded (not staged yet), the rest offered only. The numbers are in the row's cells
// and in the bar's label; the colours only repeat them.
function progressBar(wave) {
  const total = Math.max(wave.offered, 1);
  const parts = [["green", wave.green], ["rolled-back", wave.rolled_back],
    ["staged", wave.staged - wave.green - wave.rolled_back],
    ["downloaded", wave.downloaded - wave.staged]];
  const label = "wave " + wave.wave + ": " + wave.offered + " offered, " + wave.downloaded +
    " downloaded, " + wave.staged + " staged, " + wave.green + " green, " + wave.rolled_back +
    " rolled back";
  const bar = el("div", { class: "bar", role: "img", "aria-label": label, title: label });
  for (const [name, count] of parts) {
    if (count > 0) {
      const part = el("span", { class: "part part-" + name });
      part.style.width = (100 * count / total) + "%";
      bar.append(part);
    }
  }
  return bar;
}

function budgetList(budget) {
  const items = Object.entries(budget.groups || {}).map(([group, entry]) => el("li", {
    "data-group": group, class: entry.stalled ? "stalled" : null },
    budget.group_by + "=" + (group || "(none)") + ": " + (entry.updating || []).length + " of " + entry.limit +
    " updating, " + (entry.waiting || []).length + " waiting" + (entry.stalled ? " — stalled: " + entry.stalled : "")));
  return el("div", { class: "budget" },
    el("h4", { text: "Disruption budget: at most " + budget.max + " per " + budget.group_by }),
    el("ul", {}, ...items));
}

function heldList(held) {
  return el("div", { class: "held" },
    el("h4", { text: "Held devices (" + held.length + ")" }),
    el("ul", {}, ...held.map((device) => el("li", { "data-machine-id": device.machine_id },
      el("code", { text: device.machine_id.slice(0, 12) }),
      " wave " + device.wave + ": " + device.reason + " (since " + utc(device.since) + ")"))));
}

async function act(ref, name, reasonInput, forceInput) {
  const message = document.getElementById("message");
  const body = { ref };
  if (name === "halt") body.reason = reasonInput.value.trim();
  if (name === "advance") body.force = forceInput.checked;
  state.busy = true;
  message.textContent = name + " " + ref + "…";
  try {
    const response = await fetch("/api/actions/" + name, {
      method: "POST", headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body), cache: "no-store" });
    const answer = await response.json().catch(() => ({}));
    message.className = response.ok ? "done" : "refused";
    message.textContent = response.ok
      ? name + " done: rollout " + answer.rollout.id + " is " + answer.rollout.state +
        (answer.rollout.reason ? " (" + answer.rollout.reason + ")" : "") + ", " +
        answer.rollout.waves.filter((wave) => wave.opened !== null).length + " of " +
        answer.rollout.waves.length + " waves open"
      : name + " refused: " + (answer.error || "HTTP " + response.status);
  } catch (error) {
    message.className = "refused";
    message.textContent = name + " failed: " + error.message;
  } finally {
    state.busy = false;
    await poll();
  }
}

function deviceState(device) {
  if (device.last_event === null) return "never";
  return device.last_event;
}

function failedCell(device) {
  if (!device.failed_check) return "";
  if (!device.failed_log) return device.failed_check;
  const details = el("details", { open: state.openLogs.has(device.machine_id) },
    el("summary", { text: device.failed_check }),
    el("pre", { class: "log", "data-field": "failed-log", text: device.failed_log }));
  details.addEventListener("toggle", () => {
    if (details.open) state.openLogs.add(device.machine_id);
    else state.openLogs.delete(device.machine_id);
  });
  return details;
}

function renderDevices(now, inventory) {
  const text = document.getElementById("filter-text").value.trim().toLowerCase();
  const wanted = document.getElementById("filter-state").value;
  const rows = [];
  for (const device of inventory.devices) {
    const labels = Object.entries(device.labels).map(([k, v]) => k + "=" + v).join(", ");
    const haystack = [device.machine_id, labels, device.booted_version || ""].join(" ").toLowerCase();
    if (text && !haystack.includes(text)) continue;
    if (wanted === "silent" ? !device.silent : wanted === "held" ? !device.held_reason
      : wanted && deviceState(device) !== wanted) continue;
    rows.push(el("tr", { "data-machine-id": device.machine_id, class: device.silent ? "silent" : null },
      el("td", {}, el("code", { text: device.machine_id })),
      el("td", { text: labels || "—" }),
      el("td", { "data-field": "wave", text: device.wave === null ? "—" : device.wave + 1 }),
      el("td", { "data-field": "booted", text: device.booted_version || "?" }),
      el("td", { "data-field": "event", text: device.last_event || "—" }),
      el("td", { "data-field": "seen" }, ago(now, device.last_contact),
        device.silent ? el("strong", { class: "flag", text: " silent" }) : null),
      el("td", { "data-field": "failed" }, failedCell(device)),
      el("td", { "data-field": "held", text: device.held_reason || "" })));
  }
  document.querySelector("#devices tbody").replaceChildren(...rows);
  document.getElementById("device-count").textContent = rows.length + " of " +
    inventory.devices.length + " devices shown, " + inventory.silent + " silent (no verdict for " +
    duration(inventory.silent_after_seconds) + ")";
}

function renderTimeline(now, verdicts) {
  document.getElementById("timeline").replaceChildren(...verdicts.map((v) => el("li", {
    "data-event": v.event },
    el("time", { datetime: new Date(v.received * 1000).toISOString(), text: utc(v.received) }), " ",
    el("code", { text: v.machine_id.slice(0, 12) }), " " + v.event + " · rollout " + v.rollout +
    " wave " + (v.wave + 1) + (v.version ? " · " + v.version : "") +
    (v.failed_check ? " · failed: " + v.failed_check : ""))));
}

function renderHistory(overview) {
  document.querySelector("#history tbody").replaceChildren(...overview.history.map((r) => el("tr", {
    "data-rollout": r.rollout },
    el("th", { scope: "row", text: r.rollout }), el("td", { text: r.ref }),
    el("td", {}, el("code", { text: r.commit.slice(0, 12) })),
    el("td", { text: r.devices }), el("td", { text: r.green }), el("td", { text: r.rolled_back }),
    el("td", { text: utc(r.first_verdict) }), el("td", { text: utc(r.last_verdict) }))));
  document.getElementById("actions").replaceChildren(...overview.actions.map((a) => el("li", {
    "data-action": a.action, "data-outcome": a.outcome },
    el("time", { text: utc(a.time) }), " " + a.action + " " + a.outcome + " (" + a.source + ")" +
    (a.rollout ? " · rollout " + a.rollout : "") + (a.detail ? " · " + a.detail : ""))));
}

function start() {
  const form = document.getElementById("token-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    document.getElementById("message").textContent = "Token set for this tab.";
    poll();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    document.getElementById("message").textContent = "Token forgotten.";
    poll();
  });
  for (const id of ["filter-text", "filter-state"]) {
    document.getElementById(id).addEventListener("input", () => {
      if (state.overview) renderDevices(state.overview.now, state.devices);
    });
  }
  poll();
  setInterval(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", start);
