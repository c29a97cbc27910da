// What the label and criterion-grading pages share: D opens or closes the documents panel, X
// expands or collapses every tool call, "?" opens the list of shortcuts, each with a button too.
// A dialog opened through dialogOpen keeps keyboard focus inside until it closes (Tab wraps
// around, Esc closes) and then gives focus back to whatever held it. No key fires while the user
// types in a text field. The page scripts (label.js, grade.js) use typing and modalOpen to keep
// their own keys quiet at the same moments, and call refresh after swapping in a new card.
(function () {
  "use strict";
  const TYPING = "textarea, select, [contenteditable=''], [contenteditable='true'], " +
    "input:not([type=radio]):not([type=checkbox]):not([type=button]):not([type=submit]):not([type=reset])";
  const FOCUSABLE = "button:not([disabled]), a[href], input:not([disabled]), select, textarea, [tabindex]:not([tabindex='-1'])";
  const DOCS_KEY = "workbench-documents-closed";
  const returns = new WeakMap();  // dialog -> the element that had focus before it opened

  function typing(target) { return Boolean(target && target.closest && target.closest(TYPING)); }
  function modalOpen() { return document.querySelector("dialog[open]"); }

  function dialogOpen(dialog, first) {
    if (!dialog || dialog.open) return;
    returns.set(dialog, document.activeElement);
    dialog.showModal();
    const target = first || dialog.querySelector(FOCUSABLE);
    if (target) target.focus();
  }

  // The dialog's Tab stops in order; of a radio group only the checked radio (else its first).
  function tabStops(dialog) {
    const seen = new Set();
    return Array.from(dialog.querySelectorAll(FOCUSABLE)).filter((node) => {
      if (node.type !== "radio") return true;
      if (seen.has(node.name)) return false;
      seen.add(node.name);
      return true;
    }).map((node) => {
      if (node.type !== "radio") return node;
      return dialog.querySelector('input[type=radio][name="' + node.name + '"]:checked') || node;
    });
  }

  function trap(dialog, event) {
    const stops = tabStops(dialog);
    if (!stops.length) return;
    const active = document.activeElement;
    const here = active && active.type === "radio"
      ? stops.findIndex((node) => node.type === "radio" && node.name === active.name)
      : stops.indexOf(active);
    if (event.shiftKey && here <= 0) { event.preventDefault(); stops[stops.length - 1].focus(); }
    else if (!event.shiftKey && (here === -1 || here === stops.length - 1)) { event.preventDefault(); stops[0].focus(); }
  }

  // "close" does not bubble; a capturing listener still hears it for every dialog.
  document.addEventListener("close", (event) => {
    const back = returns.get(event.target);
    returns.delete(event.target);
    if (back && back.isConnected && back !== document.body) back.focus();
  }, true);

  function docsApply() {
    const closed = sessionStorage.getItem(DOCS_KEY) === "1";
    document.querySelectorAll("aside.docs").forEach((panel) => { panel.hidden = closed; });
    document.querySelectorAll("[data-docs-toggle]").forEach((button) => button.setAttribute("aria-expanded", String(!closed)));
  }

  function docsToggle() {
    if (!document.querySelector("aside.docs")) return false;
    if (sessionStorage.getItem(DOCS_KEY) === "1") sessionStorage.removeItem(DOCS_KEY);
    else sessionStorage.setItem(DOCS_KEY, "1");
    docsApply();
    return true;
  }

  function toolsApply() {
    const all = Array.from(document.querySelectorAll(".trajectory details"));
    const expanded = all.length > 0 && all.every((details) => details.open);
    document.querySelectorAll("[data-tools-toggle]").forEach((button) => {
      button.setAttribute("aria-pressed", String(expanded));
      button.firstChild.textContent = (expanded ? "Collapse" : "Expand") + " all tool calls ";
    });
  }

  // Opens every tool call unless all are open already, then closes them all.
  function toolsToggle() {
    const all = Array.from(document.querySelectorAll(".trajectory details"));
    if (!all.length) return false;
    const open = !all.every((details) => details.open);
    all.forEach((details) => { details.open = open; });
    toolsApply();
    return true;
  }

  function refresh() { docsApply(); toolsApply(); }

  document.addEventListener("keydown", (event) => {
    const dialog = modalOpen();
    if (dialog) { if (event.key === "Tab") trap(dialog, event); return; }
    if (typing(event.target) || event.altKey || event.ctrlKey || event.metaKey) return;
    const key = event.key.toLowerCase();
    if (event.key === "?") { event.preventDefault(); dialogOpen(document.getElementById("shortcuts")); }
    else if (key === "d" && docsToggle()) event.preventDefault();
    else if (key === "x" && toolsToggle()) event.preventDefault();
  });

  document.addEventListener("click", (event) => {
    const target = event.target;
    if (!target.closest) return;
    if (target.closest("[data-shortcuts-open]")) dialogOpen(document.getElementById("shortcuts"));
    else if (target.closest("[data-docs-toggle]")) docsToggle();
    else if (target.closest("[data-tools-toggle]")) toolsToggle();
    else if (target.closest("[data-dialog-close]")) target.closest("dialog").close();
  });

  // A tool call opened or closed by hand updates the button's word (toggle does not bubble).
  document.addEventListener("toggle", (event) => { if (event.target.closest(".trajectory")) toolsApply(); }, true);
  document.addEventListener("htmx:afterSwap", refresh);

  window.workbenchShortcuts = { typing, modalOpen, dialogOpen, refresh };
  refresh();
})();
