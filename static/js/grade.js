// Criterion grading, keyboard first: J/K move between criteria, P/F mark the focused one and
// move on, N opens a note (right after P/F, on the criterion just marked, since a fail is what
// needs explaining; else on the focused one), Esc leaves the note, Enter submits (htmx swaps
// in the next response).
(function () {
  "use strict";
  let index = 0;
  let justMarked = -1;  // the criterion the last key marked, until another key moves on

  function items() { return Array.from(document.querySelectorAll("#grading-card [data-item]")); }

  function focus(i) {
    const list = items();
    if (!list.length) return;
    index = Math.max(0, Math.min(i, list.length - 1));
    list.forEach((item, n) => item.classList.toggle("focused", n === index));
    list[index].focus({ preventScroll: false });
  }

  function mark(value) {
    const item = items()[index];
    if (!item) return;
    const radio = item.querySelector('input[type=radio][value="' + value + '"]');
    if (radio) radio.checked = true;
    justMarked = index;
    const next = items().findIndex((node, n) => n > index && !node.querySelector("input[type=radio]:checked"));
    focus(next === -1 ? index : next);
  }

  document.addEventListener("keydown", (event) => {
    const form = document.querySelector("#grading-card form[data-grading]");
    if (!form || event.altKey || event.ctrlKey || event.metaKey) return;
    const inNote = event.target && event.target.classList && event.target.classList.contains("note");
    if (inNote) {
      if (event.key === "Escape") { event.preventDefault(); event.target.blur(); focus(index); }
      return;  // Enter in a note submits the form natively
    }
    const key = event.key.toLowerCase();
    const marked = justMarked;
    justMarked = -1;
    if (key === "j") { event.preventDefault(); focus(index + 1); }
    else if (key === "k") { event.preventDefault(); focus(index - 1); }
    else if (key === "p") { event.preventDefault(); mark("pass"); }
    else if (key === "f") { event.preventDefault(); mark("fail"); }
    else if (key === "n") {
      event.preventDefault();
      if (marked !== -1) focus(marked);
      const note = items()[index] && items()[index].querySelector(".note");
      if (note) note.focus();
    }
    else if (event.key === "Enter") { event.preventDefault(); form.requestSubmit(); }
  });

  function firstUnmarked() {
    const n = items().findIndex((node) => !node.querySelector("input[type=radio]:checked"));
    return n === -1 ? 0 : n;
  }

  document.addEventListener("htmx:afterSwap", () => focus(firstUnmarked()));
  document.addEventListener("DOMContentLoaded", () => focus(0));
})();
