// Rubric review, keyboard first. On a criterion row: ↑/↓ (or J/K) move the focus, Enter edits,
// Alt+↑/↓ moves the criterion, Delete deletes it, A adds one. In an edit form: Enter saves
// (Shift+Enter is a new line), Escape cancels. The server renders every state; this script only
// routes keys to the links and forms that htmx already drives, and puts the focus back after a
// swap so the keyboard never loses its place.
(function () {
  "use strict";
  let pendingFocus = null;  // {key, index}: the row to focus once the next swap settles

  function review() { return document.querySelector("[data-rubric-review]"); }
  function rows() { return Array.from(document.querySelectorAll("#rubric-panel li.criterion-row:not(.editing)")); }
  function allItems() { return Array.from(document.querySelectorAll("#rubric-panel li.criterion-row, #rubric-panel li.criterion-add")); }

  function focusRow(row) {
    if (!row) return;
    row.focus();
    row.scrollIntoView({ block: "nearest" });
  }

  function rowByKey(key) {
    return rows().find((row) => row.dataset.key === key) || null;
  }

  function remember(row) {
    pendingFocus = { key: row.dataset.key, index: allItems().indexOf(row) };
  }

  function submit(row, selector) {
    const form = row.querySelector(selector);
    if (!form) return;
    remember(row);
    form.requestSubmit();
  }

  function isTyping(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  document.addEventListener("keydown", (event) => {
    if (!review() || event.isComposing) return;
    const target = event.target;
    const form = target.closest && target.closest("form[data-criterion-form]");
    if (form) {
      if (event.key === "Escape") {
        event.preventDefault();
        const li = form.closest("li");
        pendingFocus = { key: li.dataset.key, index: allItems().indexOf(li) };
        form.querySelector("[data-cancel]").click();
      } else if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.ctrlKey && !event.metaKey) {
        event.preventDefault();
        form.requestSubmit();
      }
      return;
    }
    if (isTyping(target)) return;
    const row = target.closest && target.closest("#rubric-panel li.criterion-row:not(.editing)");
    if (event.altKey && (event.key === "ArrowUp" || event.key === "ArrowDown")) {
      if (!row) return;
      event.preventDefault();
      submit(row, event.key === "ArrowUp" ? 'form[data-move="up"]' : 'form[data-move="down"]');
      return;
    }
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    const list = rows();
    const at = row ? list.indexOf(row) : -1;
    const key = event.key;
    if (key === "ArrowDown" || key === "j" || key === "J") {
      event.preventDefault();
      focusRow(list[Math.min(at + 1, list.length - 1)]);
    } else if (key === "ArrowUp" || key === "k" || key === "K") {
      event.preventDefault();
      focusRow(list[Math.max(at - 1, 0)]);
    } else if (key === "a" || key === "A") {
      const add = document.querySelector("#rubric-panel [data-add]");
      if (add) { event.preventDefault(); add.click(); }
    } else if (row && target === row && (key === "Enter" || key === "e" || key === "E")) {
      event.preventDefault();
      row.querySelector("[data-edit]").click();
    } else if (row && target === row && key === "Delete") {
      event.preventDefault();
      submit(row, "form[data-delete]");
    }
  });

  // A 409 carries the rubric as it is now (or the form with the current text): show it.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const elt = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (event.detail.xhr.status === 409 && elt && elt.closest && elt.closest("[data-rubric-review]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  document.addEventListener("htmx:afterSettle", () => {
    if (!review()) return;
    const field = document.querySelector("#rubric-panel [data-autofocus]");
    if (field) {
      field.removeAttribute("data-autofocus");
      field.focus();
      field.setSelectionRange(field.value.length, field.value.length);
      return;
    }
    const panel = document.getElementById("rubric-panel");
    if (panel && panel.dataset.focus !== undefined) {
      pendingFocus = { key: panel.dataset.focus, index: pendingFocus ? pendingFocus.index : 0 };
      delete panel.dataset.focus;
    }
    if (!pendingFocus) return;
    const wanted = pendingFocus;
    pendingFocus = null;
    if (wanted.key === "") {
      const add = document.querySelector("#rubric-panel [data-add]");
      if (add) { add.focus(); return; }
    }
    // The row itself, else (it was deleted) the criterion now in its place, else the one
    // before it: the last row's neighbour below is the "Add" item, which is not a row.
    const list = rows();
    focusRow(rowByKey(wanted.key) || list[Math.min(Math.max(wanted.index, 0), list.length - 1)]);
  });
})();
