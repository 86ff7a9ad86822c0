// Small progressive enhancements; every page works without them.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
  // Wide tables scroll inside their own box on a narrow screen; the box takes keyboard focus so it can be
  // scrolled without a pointer, and is named after the table's heading.
  document.querySelectorAll("table.table").forEach((table) => {
    if (table.closest(".scroll")) return;
    const box = document.createElement("div");
    box.className = "scroll";
    box.tabIndex = 0;
    box.setAttribute("role", "region");
    let heading = table.previousElementSibling;
    while (heading && !/^H[1-4]$/.test(heading.tagName)) heading = heading.previousElementSibling;
    box.setAttribute("aria-label", table.getAttribute("aria-label") || (heading ? heading.textContent.trim() : document.title));
    table.before(box);
    box.appendChild(table);
  });
  const toggle = document.querySelector(".menu-toggle");
  if (toggle) {
    toggle.addEventListener("click", () => {
      const open = toggle.closest(".topbar").classList.toggle("open");
      toggle.setAttribute("aria-expanded", String(open));
    });
  }
  document.querySelectorAll("select[data-autosubmit]").forEach((select) => {
    select.addEventListener("change", () => select.form.submit());
  });
  document.querySelectorAll("button[data-copy]").forEach((button) => {
    button.addEventListener("click", async () => {
      const text = document.querySelector(button.dataset.copy).textContent.trim();
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch (error) {
        button.textContent = "Select and copy";
      }
    });
  });
});
