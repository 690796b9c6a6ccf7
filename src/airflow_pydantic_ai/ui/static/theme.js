// Follow the Airflow UI's colour mode (stored by the UI under "theme": light, dark or system).
(function () {
  var root = document.documentElement;
  function apply() {
    var chosen = null;
    try { chosen = window.localStorage.getItem("theme"); } catch (error) { chosen = null; }
    var dark = chosen === "dark" ||
      ((chosen === null || chosen === "system") && window.matchMedia("(prefers-color-scheme: dark)").matches);
    root.setAttribute("data-theme", dark ? "dark" : "light");
  }
  apply();
  window.addEventListener("storage", apply);
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", apply);
})();
