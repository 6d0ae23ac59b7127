// Small behaviours that CSP forbids inline: copy buttons and confirmations.
document.addEventListener("click", (event) => {
  const copy = event.target.closest("[data-copy-target]");
  if (copy) {
    const source = document.querySelector(copy.dataset.copyTarget);
    if (source) navigator.clipboard.writeText(source.textContent.trim());
    copy.textContent = "Copied";
  }
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset && event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});
