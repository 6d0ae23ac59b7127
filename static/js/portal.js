// Small behaviours that CSP forbids inline: copy buttons, confirmations, toasts and the
// polling that stands in for live streams.
document.addEventListener("click", (event) => {
  const copy = event.target.closest("[data-copy-target]");
  if (copy) {
    const source = document.querySelector(copy.dataset.copyTarget);
    if (source) navigator.clipboard.writeText(source.textContent.trim());
    copy.textContent = "Copied";
  }
});
// The admin menu (a <details>): closes on a click elsewhere and on Escape.
document.addEventListener("click", (event) => {
  document.querySelectorAll("details[data-menu][open]").forEach((menu) => {
    if (!menu.contains(event.target)) menu.open = false;
  });
});
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  document.querySelectorAll("details[data-menu][open]").forEach((menu) => {
    menu.open = false;
    menu.querySelector("summary").focus();
  });
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset && event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

// Toasts: the server names a result in HX-Trigger ("toast"); when the answer also navigates
// ("toast-next"), the message waits in sessionStorage for the next page.
const TOAST_KEY = "portal-toast";
function showToast(message) {
  const region = document.getElementById("toasts");
  if (!region || !message) return;
  const item = document.createElement("p");
  item.className = "toast";
  item.textContent = message;
  region.appendChild(item);
  window.setTimeout(() => item.remove(), 8000);
}
document.addEventListener("toast", (event) => showToast(event.detail.message));
document.addEventListener("toast-next", (event) => {
  sessionStorage.setItem(TOAST_KEY, event.detail.message);
});
const waiting = sessionStorage.getItem(TOAST_KEY);
if (waiting) {
  sessionStorage.removeItem(TOAST_KEY);
  showToast(waiting);
}

// Live regions: an element with data-live-poll refreshes on its stream's "changed" event.
// While the stream is not open (no EventSource, refused, reconnecting) it polls instead;
// while the user is inside it (focus in a form) the refresh waits until focus leaves.
const LIVE_POLL_MS = 5000;
function setLive(event, state) {
  if (event.target.dataset) event.target.dataset.live = state;
}
document.addEventListener("htmx:sseOpen", (event) => setLive(event, "open"));
document.addEventListener("htmx:sseError", (event) => setLive(event, "down"));
document.addEventListener("htmx:sseClose", (event) => setLive(event, "down"));
window.setInterval(() => {
  document.querySelectorAll("[data-live]").forEach((source) => {
    if (source.dataset.live === "open") return;
    source.querySelectorAll("[data-live-poll]").forEach((element) => {
      htmx.trigger(element, "livepoll");
    });
  });
}, LIVE_POLL_MS);
document.addEventListener("htmx:confirm", (event) => {
  const element = event.detail.elt;
  if (!element.hasAttribute || !element.hasAttribute("data-live-poll")) return;
  if (element.contains(document.activeElement)) {
    event.preventDefault();
    element.dataset.stale = "true";
  }
});
document.addEventListener("focusout", (event) => {
  const element = event.target.closest && event.target.closest("[data-stale]");
  if (!element || element.contains(event.relatedTarget)) return;
  delete element.dataset.stale;
  htmx.trigger(element, "livepoll");
});

// A form with data-gpu-limit: its submit button is disabled while the checked boxes' data-gpus
// add up to more, the reason (data-over-limit, "{gpus}" the sum) in its aria-describedby.
document.addEventListener("change", (event) => {
  const form = event.target.closest && event.target.closest("form[data-gpu-limit]");
  if (!form) return;
  let gpus = 0;
  form.querySelectorAll("input[type=checkbox][data-gpus]:checked").forEach((box) => {
    gpus += Number(box.dataset.gpus);
  });
  const over = gpus > Number(form.dataset.gpuLimit);
  const button = form.querySelector("button[type=submit]");
  button.disabled = over;
  const reason = document.getElementById(button.getAttribute("aria-describedby"));
  if (reason) reason.textContent = over ? form.dataset.overLimit.replace("{gpus}", gpus) : "";
});
