// Pairwise labeling, keyboard first. The server renders each pair card; this script only tracks
// the choice, the confidence and the time spent, submits, and swaps in the next card. A
// submission that fails (offline, server error) is kept in localStorage and retried until the
// server has it, so no label is lost; resubmitting is harmless on the server. Kept labels are
// stored per user and project, so a label is only ever retried by a page of the person who
// made it, in its project, whoever else uses the browser in between. S skips the pair and F
// flags it with a reason (a form in a dialog); both need the server at once and are not kept.
(function () {
  "use strict";
  const CONTROLS = "summary, button";
  const app = document.getElementById("label-app");
  if (!app) return;
  const shortcuts = window.workbenchShortcuts;
  const flagDialog = document.getElementById("flag-dialog");
  const flagForm = flagDialog.querySelector("[data-flag-form]");
  const PENDING_KEY = "workbench-pending-labels:" + app.dataset.user + ":" + app.dataset.project;
  const SHARED_KEY = "workbench-pending-labels";  // before labels were kept per user and project

  const csrf = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
  const history = [];          // assignment ids already submitted, for Backspace
  let state = null;            // {card, side, confidence, started, hiddenMs, hiddenSince}
  let sending = false;

  function card() { return document.getElementById("pair-card"); }

  function start() {
    const el = card();
    if (!el || !el.dataset.assignment) { state = null; return; }
    state = {
      card: el,
      side: el.dataset.currentSide || null,
      confidence: el.dataset.currentConfidence === "" ? null : Number(el.dataset.currentConfidence),
      started: null, hiddenMs: 0, hiddenSince: null,
    };
    if (!el.querySelector("[data-intro]")) state.started = performance.now();
    render();
    exclusiveDetails(el);
  }

  function render() {
    if (!state) return;
    state.card.querySelectorAll("[data-pick]").forEach((node) => {
      node.classList.toggle("picked", node.dataset.pick === state.side);
      if (node.tagName === "BUTTON") node.setAttribute("aria-pressed", String(node.dataset.pick === state.side));
    });
    state.card.querySelectorAll("[data-confidence]").forEach((node) => {
      const on = Number(node.dataset.confidence) === state.confidence;
      node.classList.toggle("picked", on);
      node.setAttribute("aria-pressed", String(on));
    });
  }

  function status(text, kind) {
    const node = state && state.card.querySelector("[data-status]");
    if (node) { node.textContent = text; node.className = "status " + (kind || ""); }
  }

  function seconds() {
    if (!state.started) return "";
    const hidden = state.hiddenMs + (state.hiddenSince ? performance.now() - state.hiddenSince : 0);
    return ((performance.now() - state.started - hidden) / 1000).toFixed(2);
  }

  function pending(key = PENDING_KEY) { return JSON.parse(localStorage.getItem(key) || "[]"); }
  function savePending(list, key = PENDING_KEY) {
    if (list.length) localStorage.setItem(key, JSON.stringify(list));
    else localStorage.removeItem(key);
  }

  // Labels kept under the shared key of earlier versions carry no owner. The server says whose
  // each one is without receiving it: the label's pair card (a GET) opens only for its own
  // annotator. This user's labels move to this user's key; the others stay for their owners.
  async function adoptShared() {
    const project = new URL(app.dataset.nextUrl, location.href).pathname;  // this project's label page
    const mine = [];
    for (const entry of pending(SHARED_KEY).filter((p) => p.url.startsWith(project))) {
      let response = null;
      try { response = await fetch(entry.url.replace(/submit\/$/, ""), { credentials: "same-origin" }); } catch (error) { return; }
      if (response.ok && !response.redirected) mine.push(entry);
    }
    if (!mine.length) return;
    savePending(pending(SHARED_KEY).filter((p) => !mine.some((m) => m.url === p.url)), SHARED_KEY);
    savePending(pending().filter((p) => !mine.some((m) => m.url === p.url)).concat(mine));
  }

  async function post(url, data) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "X-CSRFToken": csrf, "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(data),
      credentials: "same-origin",
    });
    return response;
  }

  function swap(html) {
    const holder = document.createElement("div");
    holder.innerHTML = html;
    const next = holder.querySelector("#pair-card");
    if (next) { card().replaceWith(next); start(); shortcuts.refresh(); window.scrollTo(0, 0); }
  }

  async function submit() {
    if (!state || sending) return;
    if (!state.side) { status("Pick a side first: ← or →" + (state.card.dataset.allowTies === "1" ? ", or T for a tie." : "."), "warn"); return; }
    if (state.confidence === null) { status("Set your confidence: 1 (a guess), 2 (leaning) or 3 (certain).", "warn"); return; }
    const entry = {
      url: state.card.dataset.submitUrl,
      assignment: state.card.dataset.assignment,
      data: { side: state.side, confidence: String(state.confidence), seconds: seconds() },
    };
    savePending(pending().filter((p) => p.url !== entry.url).concat([entry]));
    await flush(entry);
  }

  // Send every pending submission, oldest first; the last answer carries the next card.
  async function flush(current) {
    sending = true;
    let delay = 1000;
    for (;;) {
      const queue = pending();
      if (!queue.length) break;
      const entry = queue[0];
      let response = null;
      try { response = await post(entry.url, entry.data); } catch (error) { response = null; }
      if (response && (response.redirected || response.status === 403)) {
        // The session ended (the login page answered) or changed (a login elsewhere renews the
        // CSRF token, which this page holds): nothing was saved, and no retry from this page
        // can be. The label stays kept for this page's user, whose next label page sends it.
        status("Not saved: your session has ended or changed. Log in again and reload this page; this label is kept and will be sent.", "error");
        break;
      }
      if (response && response.ok) {
        savePending(pending().filter((p) => p.url !== entry.url));
        if (!history.includes(entry.assignment)) history.push(entry.assignment);
        if (current && entry.url === current.url) swap(await response.text());
        delay = 1000;
        continue;
      }
      if (response && response.status >= 400 && response.status < 500) {
        // The server refused this label (it names why); keep the card so it can be fixed.
        savePending(pending().filter((p) => p.url !== entry.url));
        status(await response.text(), "error");
        break;
      }
      status("Not saved yet (offline or server error); retrying in " + Math.round(delay / 1000) + " s. Your label is kept.", "warn");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 30000);
    }
    sending = false;
  }

  // Skip or flag: the server answers with the next card, or says why not (400, in words).
  async function passOn(url, data, say) {
    if (!state || sending) return false;
    sending = true;
    let response = null;
    try { response = await post(url, data); } catch (error) { response = null; }
    sending = false;
    if (response && response.ok && !response.redirected) { swap(await response.text()); return true; }
    if (response && response.status === 400) say(await response.text(), "error");
    else say("Not sent (offline, server error or an ended session); nothing changed. Try again.", "error");
    return false;
  }

  function skip() { passOn(state.card.dataset.skipUrl, {}, status); }

  function flagOpen() {
    flagForm.reset();
    flagDialog.querySelector("[data-flag-status]").textContent = "";
    flagForm.dataset.url = state.card.dataset.flagUrl;
    shortcuts.dialogOpen(flagDialog, flagForm.querySelector("input[name=reason]"));
  }

  function flagStatus(text, kind) {
    const node = flagDialog.querySelector("[data-flag-status]");
    node.textContent = text;
    node.className = "status " + (kind || "");
  }

  flagForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = { reason: flagForm.elements.reason.value, note: flagForm.elements.note.value };
    if (await passOn(flagForm.dataset.url, data, flagStatus)) flagDialog.close();
  });

  // Enter on a reason sends the flag (in the note it starts a new line).
  flagForm.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target.type === "radio") { event.preventDefault(); flagForm.requestSubmit(); }
  });

  async function previous() {
    if (!state && !history.length) return;
    const current = state ? state.card.dataset.assignment : null;
    let index = current ? history.indexOf(current) : -1;
    const target = index > 0 ? history[index - 1] : index === -1 ? history[history.length - 1] : null;
    if (!target) { status("No earlier pair in this session.", "warn"); return; }
    const url = (state ? state.card.dataset.reviseUrl : app.dataset.reviseUrl).replace(/\/0\/$/, "/" + target + "/");
    const response = await fetch(url + "?fragment=1", { credentials: "same-origin" });
    if (response.ok) swap(await response.text());
  }

  function exclusiveDetails(root) {
    root.querySelectorAll("details[data-exclusive]").forEach((details) => {
      details.addEventListener("toggle", () => {
        if (!details.open) return;
        root.querySelectorAll("details[data-exclusive]").forEach((other) => { if (other !== details) other.open = false; });
      });
    });
  }

  function introShown() {
    const intro = state.card.querySelector("[data-intro]");
    return Boolean(intro && !intro.hidden);
  }

  // The pair's time starts when its intro is put away, by Enter or by the Start button.
  function introDismiss() {
    state.card.querySelector("[data-intro]").hidden = true;
    state.card.querySelector(".pair-body").hidden = false;
    state.started = performance.now();
  }

  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (shortcuts.modalOpen() || shortcuts.typing(target)) return;
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    // Enter on a focused control does what the control does (an expander opens or closes, a
    // button is pressed, a link is followed); Enter anywhere else submits.
    if (event.key === "Enter" && target.closest && target.closest(CONTROLS + ", a[href]")) return;
    if (!state) { if (event.key === "Backspace") { event.preventDefault(); previous(); } return; }
    if (introShown()) {
      if (event.key === "Enter") { event.preventDefault(); introDismiss(); }
      return;
    }
    const keys = { ArrowLeft: "left", ArrowRight: "right" };
    if (state.card.dataset.allowTies === "1") { keys.t = "tie"; keys.T = "tie"; }
    if (keys[event.key]) { event.preventDefault(); state.side = keys[event.key]; render(); status(""); return; }
    if (["1", "2", "3"].includes(event.key)) { event.preventDefault(); state.confidence = Number(event.key) - 1; render(); status(""); return; }
    if (event.key === "Enter") { event.preventDefault(); submit(); return; }
    if (event.key === "Backspace") { event.preventDefault(); previous(); return; }
    if ((event.key === "s" || event.key === "S") && state.card.querySelector("[data-skip]")) { event.preventDefault(); skip(); return; }
    if (event.key === "f" || event.key === "F") { event.preventDefault(); flagOpen(); }
  });

  // A click on a response card (or its Response 1/2 button) picks that side, unless it lands in
  // an expander or a link or ends a text selection: those only do their own thing.
  document.addEventListener("click", (event) => {
    if (!state || !state.card.contains(event.target)) return;
    const target = event.target;
    if (target.closest("[data-intro-start]") && introShown()) { introDismiss(); return; }
    if (target.closest("[data-submit]")) { submit(); return; }
    if (target.closest("[data-skip]")) { skip(); return; }
    if (target.closest("[data-flag]")) { flagOpen(); return; }
    const confidence = target.closest("button[data-confidence]");
    if (confidence) { state.confidence = Number(confidence.dataset.confidence); render(); status(""); return; }
    if (target.closest("details, a") || !document.getSelection().isCollapsed) return;
    const pick = target.closest("[data-pick]");
    if (pick) { state.side = pick.dataset.pick; render(); status(""); }
  });

  // Pressing a control with the pointer does not move keyboard focus onto it, so Enter still
  // submits after the mouse opened an expander or picked a side; Tab reaches controls for keys.
  document.addEventListener("mousedown", (event) => {
    if (state && state.card.contains(event.target) && event.target.closest(CONTROLS)) event.preventDefault();
  });

  document.addEventListener("visibilitychange", () => {
    if (!state || !state.started) return;
    if (document.hidden) state.hiddenSince = performance.now();
    else if (state.hiddenSince) { state.hiddenMs += performance.now() - state.hiddenSince; state.hiddenSince = null; }
  });

  window.addEventListener("online", () => { if (pending().length && !sending) flush(null); });

  app.dataset.reviseUrl = (card() && card().dataset.reviseUrl) || "";
  start();
  adoptShared().finally(() => { if (pending().length && !sending) flush(null); });
})();
