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

// Focus after a form is sent. Answered in place (htmx swapped the form or its section): the
// first field refused, else the form's own refusal, else the result the answer marks with
// data-result. Answered by a navigation: the element the server named (HX-Trigger
// "focus-next" over htmx, or the address's #fragment after a plain post's redirect).
const FOCUS_KEY = "portal-focus";
function focusOn(element) {
  if (!element) return;
  if (element.tabIndex < 0 && !element.hasAttribute("tabindex")) element.setAttribute("tabindex", "-1");
  element.focus();
}
function firstRefusal(within) {
  return within.querySelector('[aria-invalid="true"]')
    || Array.from(within.querySelectorAll(".field-error[role=alert]"))
      .find((message) => message.textContent.trim() !== "");
}
document.addEventListener("htmx:afterSettle", (event) => {
  const config = event.detail.requestConfig;
  if (!config || !config.triggeringEvent || config.triggeringEvent.type !== "submit") return;
  const swapped = event.target;
  if (!swapped.querySelector) return;
  focusOn(firstRefusal(swapped) || swapped.querySelector("[data-result]")
    || (swapped.hasAttribute("data-result") ? swapped : null));
});
document.addEventListener("focus-next", (event) => {
  sessionStorage.setItem(FOCUS_KEY, event.detail.element);
});
function focusArrival() {
  const named = sessionStorage.getItem(FOCUS_KEY);
  sessionStorage.removeItem(FOCUS_KEY);
  const wanted = named || (window.location.hash.length > 1 ? window.location.hash : "");
  if (!wanted) return;
  try {
    focusOn(document.querySelector(wanted));
  } catch (error) {
    // not a selector (an address's own #fragment): nothing to focus
  }
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", focusArrival);
else focusArrival();
