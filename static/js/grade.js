// Criterion grading, keyboard first: J/K move between criteria, P/F mark the focused one and
// move on to the next unmarked one, N opens a note (right after P/F, on the criterion just
// marked, since a fail is what needs explaining; else on the focused one), Esc or Enter closes
// the note and moves on to the next unmarked criterion, Enter submits (htmx swaps in the next
// response). The focused criterion is always the one that holds keyboard focus, however it got
// there (keys, Tab or the mouse), so a mark never lands on a criterion the user has left.
(function () {
  "use strict";
  let index = 0;
  let justMarked = -1;  // the criterion the last key marked, until another key moves on

  function items() { return Array.from(document.querySelectorAll("#grading-card [data-item]")); }

  function focus(i) {
    const list = items();
    if (!list.length) return;
    list[Math.max(0, Math.min(i, list.length - 1))].focus({ preventScroll: false });
  }

  function marked(item) { return Boolean(item.querySelector("input[type=radio]:checked")); }

  // The first unmarked criterion from `i` on, wrapping around; `i` itself when all are marked.
  function unmarkedFrom(i) {
    const list = items();
    for (let step = 0; step < list.length; step++) {
      const n = (i + step) % list.length;
      if (!marked(list[n])) return n;
    }
    return i;
  }

  function mark(value) {
    const item = items()[index];
    if (!item) return;
    const radio = item.querySelector('input[type=radio][value="' + value + '"]');
    if (radio) radio.checked = true;
    justMarked = index;
    focus(unmarkedFrom(index));
  }

  // Keyboard focus entering a criterion (or its note or radios) makes it the focused one.
  document.addEventListener("focusin", (event) => {
    const item = event.target.closest && event.target.closest("#grading-card [data-item]");
    if (!item) return;
    index = items().indexOf(item);
    items().forEach((node) => node.classList.toggle("focused", node === item));
  });

  document.addEventListener("keydown", (event) => {
    const form = document.querySelector("#grading-card form[data-grading]");
    if (!form || event.altKey || event.ctrlKey || event.metaKey) return;
    if (window.workbenchShortcuts.modalOpen()) return;  // the shortcuts list has the keys
    const inNote = event.target && event.target.classList && event.target.classList.contains("note");
    if (inNote) {
      if (event.key === "Escape" || event.key === "Enter") {
        event.preventDefault();
        focus(unmarkedFrom(items().indexOf(event.target.closest("[data-item]"))));
      }
      return;
    }
    const key = event.key.toLowerCase();
    const last = justMarked;
    justMarked = -1;
    if (key === "j") { event.preventDefault(); focus(index + 1); }
    else if (key === "k") { event.preventDefault(); focus(index - 1); }
    else if (key === "p") { event.preventDefault(); mark("pass"); }
    else if (key === "f") { event.preventDefault(); mark("fail"); }
    else if (key === "n") {
      event.preventDefault();
      const item = items()[last !== -1 ? last : index];
      const note = item && item.querySelector(".note");
      if (note) note.focus();
    }
    // Enter on a button (documents, tool calls) presses it; anywhere else it submits.
    else if (event.key === "Enter" && !event.target.closest("button")) { event.preventDefault(); form.requestSubmit(); }
  });

  document.addEventListener("htmx:afterSwap", () => focus(unmarkedFrom(0)));
  document.addEventListener("DOMContentLoaded", () => focus(0));
})();
