// Keyboard-first annotation workspace: number keys rate, j/k move the label's target between the
// trajectory and its steps, c/e focus the comment/correction, Esc leaves a text box, s submits, x skips,
// p opens the previous item (to change the last label).
// The page works without it (plain forms); this only adds the keys.
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("label-form");
  if (!form) return;
  const targets = Array.from(document.querySelectorAll(".ws-target"));
  const stepField = document.getElementById("step-id");
  const targetName = document.getElementById("target-name");
  let position = 0;

  function select(next) {
    position = Math.max(0, Math.min(targets.length - 1, next));
    targets.forEach((element, index) => element.classList.toggle("selected", index === position));
    const chosen = targets[position];
    stepField.value = chosen.dataset.stepId || "";
    targetName.textContent = chosen.dataset.name;
    chosen.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("keydown", (event) => {
    const typing = ["TEXTAREA", "INPUT", "SELECT"].includes(document.activeElement.tagName)
      && document.activeElement.type !== "radio";
    if (typing) {
      if (event.key === "Escape") document.activeElement.blur();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const option = form.querySelector(`input[name=option][value="${event.key}"]`);
    if (option) {
      option.checked = true;
      event.preventDefault();
      return;
    }
    const actions = {
      j: () => select(position + 1),
      k: () => select(position - 1),
      c: () => document.getElementById("comment").focus(),
      e: () => document.getElementById("correction").focus(),
      s: () => form.requestSubmit(),
      x: () => document.getElementById("skip-form").requestSubmit(),
      p: () => { const link = document.getElementById("previous-link"); if (link) link.click(); },
    };
    if (actions[event.key]) {
      event.preventDefault();
      actions[event.key]();
    }
  });
});
