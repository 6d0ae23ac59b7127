// portalctl login: posts the handoff form to the command line's listener on 127.0.0.1 at once.
// The form carries the new token in its body, never in a URL (see app/auth/cli_login.py).
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("cli-handoff").submit();
});
