// The top bar's section menus are <details>: open one and the others close; Escape or a click
// elsewhere closes it, and Escape puts the focus back on its summary.
(function () {
  "use strict";
  function menus() { return document.querySelectorAll("details.menu"); }
  document.addEventListener("toggle", function (event) {
    var opened = event.target;
    if (!opened.matches || !opened.matches("details.menu") || !opened.open) return;
    menus().forEach(function (menu) { if (menu !== opened) menu.open = false; });
  }, true);
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    menus().forEach(function (menu) {
      if (!menu.open) return;
      menu.open = false;
      if (menu.contains(document.activeElement)) menu.querySelector("summary").focus();
    });
  });
  document.addEventListener("click", function (event) {
    menus().forEach(function (menu) { if (menu.open && !menu.contains(event.target)) menu.open = false; });
  });
})();
